package kruntimes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// Invocation is one invocation's answer (Function.Call): the handler's value
// and what it left in $KRUNTIME_ARTIFACTS_DIR.
type Invocation struct {
	// Output is the handler's JSON value (what Invoke decodes).
	Output json.RawMessage
	// Artifacts are the files the invocation left, exported before its
	// answer and named invocations/{id}/… in the Run ({id} the invocation ID
	// when it is a valid name segment, else a 32-hex hash of it): read them
	// with Client.Artifacts, by the Run's name and the ref's Name. None when
	// it left none, or on a Runtime without an artifact store.
	Artifacts []ArtifactRef
	// InvocationID is the answer's X-Kruntimes-Invocation-Id: the one sent
	// (WithInvocationID), or the one the gateway chose.
	InvocationID string
}

// Invoke calls the handler with input (encoded as JSON; nil sends {}) and
// decodes its JSON output into output (nil discards it; a *json.RawMessage
// keeps it as is). An answer with artifacts gives its outputs (Call has the
// refs too). The context bounds the call. Never retried: a *BusyError or
// *UnavailableError may be retried after its RetryAfter.
func (f *Function) Invoke(ctx context.Context, input, output any, opts ...InvokeOption) error {
	inv, err := f.Call(ctx, input, opts...)
	if err != nil || output == nil {
		return err
	}
	if err := json.Unmarshal(inv.Output, output); err != nil {
		return &NetworkError{Op: http.MethodPost + " " + f.Endpoint(), Err: fmt.Errorf("decode the answer: %w", err)}
	}
	return nil
}

// Call is Invoke, returning the whole *Invocation: the handler's output, the
// refs of the files it left in $KRUNTIME_ARTIFACTS_DIR and the invocation ID.
// On a Runtime with an artifact store, an invocation that left files is
// answered with X-Kruntimes-Artifacts: N and the envelope {"outputs": …,
// "artifactRefs": […]}; without that header the body is the handler's value,
// whatever its shape. An envelope that is not one is a *NetworkError (the
// call ran; its answer is unreadable).
func (f *Function) Call(ctx context.Context, input any, opts ...InvokeOption) (*Invocation, error) {
	endpoint, ca, err := f.resolve(ctx)
	if err != nil {
		return nil, err
	}
	if input == nil {
		input = struct{}{}
	}
	body, err := json.Marshal(input)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	for _, o := range opts {
		o(h)
	}
	h.Set("Content-Type", "application/json")
	resp, err := f.c.gw.do(ctx, request{method: http.MethodPost, url: endpoint, header: h, caPEM: ca, body: bytes.NewReader(body)})
	var nf *NotFoundError
	if errors.As(err, &nf) && f.name != "" {
		// The Run was deleted, maybe re-created under a new UID: look it up again next time.
		f.mu.Lock()
		f.endpoint, f.caPEM = "", ""
		f.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, &NetworkError{Op: http.MethodPost + " " + endpoint, Err: err}
	}
	inv, err := invocation(resp.Header, answer)
	if err != nil {
		return nil, &NetworkError{Op: http.MethodPost + " " + endpoint, Err: fmt.Errorf("decode the answer: %w", err)}
	}
	return inv, nil
}

// invocation is the *Invocation of a 2xx invoke answer: the body as it is,
// or, under X-Kruntimes-Artifacts, the envelope's outputs and artifactRefs.
func invocation(header http.Header, body []byte) (*Invocation, error) {
	inv := &Invocation{InvocationID: header.Get("X-Kruntimes-Invocation-Id")}
	count := header.Values("X-Kruntimes-Artifacts")
	if len(count) == 0 {
		body = bytes.TrimSpace(body)
		if !json.Valid(body) {
			return nil, errors.New("the body is not JSON")
		}
		inv.Output = json.RawMessage(body)
		return inv, nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil || doc == nil {
		return nil, fmt.Errorf("X-Kruntimes-Artifacts: %s, but the body is not an object", count[0])
	}
	outputs, hasOutputs := doc["outputs"]
	refs := bytes.TrimSpace(doc["artifactRefs"])
	if !hasOutputs || !bytes.HasPrefix(refs, []byte("[")) {
		return nil, fmt.Errorf("X-Kruntimes-Artifacts: %s, but the body is not an object with outputs and a list artifactRefs", count[0])
	}
	if err := json.Unmarshal(refs, &inv.Artifacts); err != nil {
		return nil, fmt.Errorf("X-Kruntimes-Artifacts: %s, but an artifact ref is malformed: %w", count[0], err)
	}
	for i := range inv.Artifacts {
		inv.Artifacts[i].SHA256 = strings.ToLower(inv.Artifacts[i].SHA256)
	}
	inv.Output = outputs
	return inv, nil
}
