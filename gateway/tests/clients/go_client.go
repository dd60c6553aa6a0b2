// One request with Go's net/http, for gateway/tests/client_errors.rs.
//
// usage: go run go_client.go METHOD URL CA_FILE BODY_FILE|- [NAME=VALUE ...]
// The bearer token, if any, comes from KRT_TOKEN. Prints the status on the
// first line, then the body.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	method, url, ca, bodyFile, headers := args[0], args[1], args[2], args[3], args[4:]
	pem, err := os.ReadFile(ca)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	var body io.Reader
	if bodyFile != "-" {
		b, err := os.ReadFile(bodyFile)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return err
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, "=")
		req.Header.Set(name, value)
	}
	if t := os.Getenv("KRT_TOKEN"); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	client := &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true},
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("%d\n%s", resp.StatusCode, text)
	return nil
}
