"""One request with Python's http.client or httpx, for gateway/tests/client_errors.rs.

usage: http_client.py http.client|httpx METHOD URL CA_FILE BODY_FILE|- [NAME=VALUE ...]
The bearer token, if any, comes from KRT_TOKEN. Prints the status on the
first line, then the body.
"""
import os
import ssl
import sys
import urllib.parse


def main() -> None:
    lib, method, url, ca, body_file, *headers = sys.argv[1:]
    body = b"" if body_file == "-" else open(body_file, "rb").read()
    hdrs = dict(h.split("=", 1) for h in headers)
    if os.environ.get("KRT_TOKEN"):
        hdrs["Authorization"] = "Bearer " + os.environ["KRT_TOKEN"]
    if lib == "http.client":
        import http.client

        u = urllib.parse.urlsplit(url)
        ctx = ssl.create_default_context(cafile=ca)
        conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=60)
        path = u.path + (("?" + u.query) if u.query else "")
        conn.request(method, path, body=body or None, headers=hdrs)
        r = conn.getresponse()
        status, text = r.status, r.read()
    else:
        import httpx

        with httpx.Client(verify=ssl.create_default_context(cafile=ca), timeout=60) as c:
            r = c.request(method, url, content=body or None, headers=hdrs)
            status, text = r.status_code, r.content
    sys.stdout.write(f"{status}\n")
    sys.stdout.write(text.decode("utf-8", "replace"))


main()
