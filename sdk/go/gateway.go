package kruntimes

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// gateway sends requests to the gateway: one connection pool per CA bundle
// (each Run's status names the CA its endpoint chains to), every request
// authenticated by auth. Nothing is retried here.
type gateway struct {
	defaultCAs *x509.CertPool // nil: the system's
	auth       func(http.RoundTripper) (http.RoundTripper, error)

	mu    sync.Mutex
	pools map[string]*http.Client
}

func newGateway(caFile string, auth func(http.RoundTripper) (http.RoundTripper, error)) (*gateway, error) {
	g := &gateway{auth: auth, pools: map[string]*http.Client{}}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read gateway CA: %w", err)
		}
		if g.defaultCAs, err = certPool(pem); err != nil {
			return nil, fmt.Errorf("%s: %w", caFile, err)
		}
	}
	return g, nil
}

func certPool(pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in the CA bundle")
	}
	return pool, nil
}

func (g *gateway) client(caPEM string) (*http.Client, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.pools[caPEM]; ok {
		return c, nil
	}
	roots := g.defaultCAs
	if caPEM != "" {
		var err error
		if roots, err = certPool([]byte(caPEM)); err != nil {
			return nil, err
		}
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	rt, err := g.auth(base)
	if err != nil {
		return nil, fmt.Errorf("gateway credentials: %w", err)
	}
	// No client-wide timeout: contexts bound calls, the server bounds operations.
	c := &http.Client{Transport: rt}
	g.pools[caPEM] = c
	return c, nil
}

// request is one call to the gateway.
type request struct {
	method, url string
	query       url.Values
	body        io.Reader
	header      http.Header
	caPEM       string
}

// do sends r and returns the 2xx response (its body to be closed by the
// caller), or the typed error of any other answer.
func (g *gateway) do(ctx context.Context, r request) (*http.Response, error) {
	c, err := g.client(r.caPEM)
	if err != nil {
		return nil, err
	}
	u := r.url
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, r.body)
	if err != nil {
		return nil, err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, &NetworkError{Op: r.method + " " + r.url, Err: err}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return nil, fromAnswer("gateway", resp.StatusCode, resp.Header, body)
}

// json sends r with a JSON body (when in is not nil) and decodes the answer
// into out (when not nil).
func (g *gateway) json(ctx context.Context, r request, in, out any) error {
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		r.body = bytes.NewReader(b)
		if r.header == nil {
			r.header = http.Header{}
		}
		r.header.Set("Content-Type", "application/json")
	}
	resp, err := g.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &NetworkError{Op: r.method + " " + r.url, Err: fmt.Errorf("decode the answer: %w", err)}
	}
	return nil
}

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
