package kruntimes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// Function is a function-mode Run: a handler registered once, invoked many
// times. It is safe for concurrent use (the Run itself serves one invocation
// at a time: a second one is a *BusyError).
type Function struct {
	c    *Client
	name string

	mu       sync.Mutex
	endpoint string
	caPEM    string
}

// Function is the function Run name in the client's namespace, looked up at
// the first call (and again after a *NotFoundError: a re-created Run has a
// new UID).
func (c *Client) Function(name string) *Function { return &Function{c: c, name: name} }

// FunctionAt is the function Run at endpoint (Run.status.endpoint.url).
func (c *Client) FunctionAt(endpoint string) *Function { return &Function{c: c, endpoint: endpoint} }

// Name is the Run's name ("" when addressed by endpoint).
func (f *Function) Name() string { return f.name }

// Endpoint is the invoke URL, once looked up.
func (f *Function) Endpoint() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.endpoint
}

func (f *Function) resolve(ctx context.Context) (string, string, error) {
	f.mu.Lock()
	endpoint, ca := f.endpoint, f.caPEM
	f.mu.Unlock()
	if endpoint != "" {
		return endpoint, ca, nil
	}
	run, err := f.c.lookup(ctx, f.name, "function")
	if err != nil {
		return "", "", err
	}
	if run.Endpoint == "" {
		store, _ := f.c.store()
		return "", "", typed(APIError{Status: 503, Code: "NotReady", Source: store.source(),
			Message: fmt.Sprintf("run %s/%s has no endpoint yet (phase %s)", run.Namespace, run.Name, run.Phase)})
	}
	f.mu.Lock()
	f.endpoint, f.caPEM = run.Endpoint, run.CABundle
	f.mu.Unlock()
	return run.Endpoint, run.CABundle, nil
}

// InvokeOption configures one invocation.
type InvokeOption func(http.Header)

// WithInvocationID sends X-Kruntimes-Invocation-Id (1–128 visible ASCII
// bytes); errors carry it back.
func WithInvocationID(id string) InvokeOption {
	return func(h http.Header) { h.Set("X-Kruntimes-Invocation-Id", id) }
}

// Invoke calls the handler with input (encoded as JSON; nil sends {}) and
// decodes its JSON output into output (nil discards it; a *json.RawMessage
// keeps it as is). The context bounds the call. Never retried: a *BusyError
// or *UnavailableError may be retried after its RetryAfter.
func (f *Function) Invoke(ctx context.Context, input, output any, opts ...InvokeOption) error {
	endpoint, ca, err := f.resolve(ctx)
	if err != nil {
		return err
	}
	if input == nil {
		input = struct{}{}
	}
	h := http.Header{}
	for _, o := range opts {
		o(h)
	}
	err = f.c.gw.json(ctx, request{method: http.MethodPost, url: endpoint, header: h, caPEM: ca}, input, output)
	var nf *NotFoundError
	if errors.As(err, &nf) && f.name != "" {
		f.mu.Lock()
		f.endpoint, f.caPEM = "", ""
		f.mu.Unlock()
	}
	return err
}
