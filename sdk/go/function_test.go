package kruntimes

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

const invokePath = "/v1/namespaces/a/runtimes/python/runs/u-1:invoke"

var invocationRefs = []map[string]any{
	{"name": "invocations/sdk-1/report.txt", "uri": "file:///state/artifacts/a/u-1/files/invocations/sdk-1/report.txt",
		"size": 11, "sha256": "B94D27B9934D3E08A52E52D7DA7DABFAC484EFE37A5380EE9088F7ACE2EFCDE9"},
	{"name": "invocations/sdk-1/logs/a.txt", "uri": "file:///state/artifacts/a/u-1/files/invocations/sdk-1/logs/a.txt",
		"size": 1, "sha256": "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"},
}

// answer is one scripted invoke answer: its headers and body.
type answer struct {
	header map[string]string
	body   string
}

// functionOn is a function addressed by endpoint on a fake gateway that
// answers each invoke with the next of answers (echoing the invocation ID).
func functionOn(t *testing.T, answers ...answer) (*Function, *recorder) {
	t.Helper()
	srv, rec := fake(t, func(w http.ResponseWriter, r *http.Request) {
		a := answers[0]
		answers = answers[1:]
		if id := r.Header.Get("X-Kruntimes-Invocation-Id"); id != "" {
			w.Header().Set("X-Kruntimes-Invocation-Id", id)
		}
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(a.body))
	})
	c, err := New(srv.URL, "t", WithCAFile(caFile(t, srv)))
	if err != nil {
		t.Fatal(err)
	}
	return c.FunctionAt(srv.URL + invokePath), rec
}

// envelope is an answer with artifacts: the envelope, marked by its header.
func envelope(t *testing.T, outputs any, refs []map[string]any) answer {
	b, err := json.Marshal(map[string]any{"outputs": outputs, "artifactRefs": refs})
	if err != nil {
		t.Fatal(err)
	}
	return answer{map[string]string{"X-Kruntimes-Artifacts": "2"}, string(b)}
}

func TestAPlainAnswerIsTheHandlersValue(t *testing.T) {
	fn, rec := functionOn(t, answer{nil, `{"message": "hi"}` + "\n"}, answer{nil, `{"message": "hi"}`})
	ctx := context.Background()
	var out map[string]string
	if err := fn.Invoke(ctx, map[string]string{"name": "x"}, &out, WithInvocationID("gw-7")); err != nil || out["message"] != "hi" {
		t.Fatal(out, err)
	}
	inv, err := fn.Call(ctx, nil)
	if err != nil || string(inv.Output) != `{"message": "hi"}` || inv.Artifacts != nil || inv.InvocationID != "" {
		t.Fatalf("%+v %v", inv, err)
	}
	calls := rec.all()
	if calls[0].Header.Get("X-Kruntimes-Invocation-Id") != "gw-7" || calls[1].Header.Get("Content-Type") != "application/json" {
		t.Errorf("%v %v", calls[0].Header, calls[1].Header)
	}
}

func TestInvokeUnwrapsTheEnvelopeToTheHandlersValue(t *testing.T) {
	fn, _ := functionOn(t, envelope(t, map[string]any{"summary": "ok", "n": []int{1, 2}}, invocationRefs),
		envelope(t, nil, invocationRefs), envelope(t, "x", invocationRefs))
	ctx := context.Background()
	var out struct {
		Summary string
		N       []int
	}
	if err := fn.Invoke(ctx, nil, &out, WithInvocationID("sdk-1")); err != nil || out.Summary != "ok" || !reflect.DeepEqual(out.N, []int{1, 2}) {
		t.Fatal(out, err)
	}
	var raw json.RawMessage
	if err := fn.Invoke(ctx, nil, &raw); err != nil || string(raw) != "null" {
		t.Fatal(string(raw), err)
	}
	if err := fn.Invoke(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestCallHandsOutTheOutputTheRefsAndTheInvocationID(t *testing.T) {
	fn, _ := functionOn(t, envelope(t, map[string]any{"summary": "ok"}, invocationRefs))
	inv, err := fn.Call(context.Background(), map[string]int{"x": 1}, WithInvocationID("sdk-1"))
	if err != nil {
		t.Fatal(err)
	}
	want := []ArtifactRef{
		{"invocations/sdk-1/report.txt", "file:///state/artifacts/a/u-1/files/invocations/sdk-1/report.txt", 11,
			"b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"},
		{"invocations/sdk-1/logs/a.txt", "file:///state/artifacts/a/u-1/files/invocations/sdk-1/logs/a.txt", 1,
			"ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"},
	}
	if string(inv.Output) != `{"summary":"ok"}` || !reflect.DeepEqual(inv.Artifacts, want) || inv.InvocationID != "sdk-1" {
		t.Errorf("%s %+v %q", inv.Output, inv.Artifacts, inv.InvocationID)
	}
}

func TestWithoutTheHeaderABodyShapedLikeAnEnvelopeIsTheHandlersValue(t *testing.T) {
	body := `{"outputs": 1, "artifactRefs": [{"name": "invocations/x/y"}]}`
	fn, _ := functionOn(t, answer{nil, body}, answer{nil, body})
	ctx := context.Background()
	var out map[string]any
	if err := fn.Invoke(ctx, nil, &out); err != nil || out["outputs"] != 1.0 || out["artifactRefs"] == nil {
		t.Fatal(out, err)
	}
	inv, err := fn.Call(ctx, nil)
	if err != nil || string(inv.Output) != body || len(inv.Artifacts) != 0 {
		t.Fatalf("%+v %v", inv, err)
	}
}

func TestAMalformedEnvelopeIsAnErrorOfTheAnswer(t *testing.T) {
	for _, body := range []string{
		`[1, 2]`,               // not an object
		`null`,                 // nor this
		`{"artifactRefs": []}`, // no outputs
		`{"outputs": 1}`,       // no refs
		`{"outputs": 1, "artifactRefs": null}`,
		`{"outputs": 1, "artifactRefs": {"name": "x"}}`,
		`{"outputs": 1, "artifactRefs": ["invocations/x/y"]}`, // a ref not an object
		`{"outputs": 1, "artifactRefs": [{"name": "a", "size": "big"}]}`,
		`not json`,
	} {
		bad := answer{map[string]string{"X-Kruntimes-Artifacts": "1"}, body}
		fn, rec := functionOn(t, bad, bad)
		ctx := context.Background()
		var ne *NetworkError
		if _, err := fn.Call(ctx, nil); !errors.As(err, &ne) || !strings.Contains(err.Error(), "X-Kruntimes-Artifacts: 1") ||
			!strings.HasSuffix(ne.Op, invokePath) {
			t.Errorf("%s: call: %T %v", body, err, err)
		}
		var out any
		if err := fn.Invoke(ctx, nil, &out); !errors.As(err, &ne) {
			t.Errorf("%s: invoke: %T %v", body, err, err)
		}
		if n := len(rec.all()); n != 2 {
			t.Errorf("%s: %d calls", body, n)
		}
	}
}
