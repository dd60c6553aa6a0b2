package kruntimes

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kubeRun is a Run object as the API server answers it; its endpoint's CA is
// the fake gateway's.
func kubeRun(phase, mode, endpoint string, gw ...*httptest.Server) map[string]any {
	status := map[string]any{"phase": phase}
	if endpoint != "" {
		status["endpoint"] = map[string]any{"url": endpoint}
	}
	if len(gw) > 0 {
		status["endpoint"].(map[string]any)["caBundle"] = base64.StdEncoding.EncodeToString([]byte(caPEM(gw[0])))
	}
	return map[string]any{
		"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
		"metadata": map[string]any{"name": "hello", "namespace": "a", "uid": "u-1"},
		"spec":     map[string]any{"runtime": "python", "mode": map[string]any{mode: map[string]any{}}},
		"status":   status,
	}
}

// writeKubeconfig writes a kubeconfig for the fake API server srv.
func writeKubeconfig(t *testing.T, srv *httptest.Server, user string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	doc := fmt.Sprintf("apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n%s",
		srv.URL, base64.StdEncoding.EncodeToString([]byte(caPEM(srv))), user)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func contextFor(user string) string {
	return "contexts:\n- name: test\n  context:\n    cluster: c\n    user: u\n    namespace: a\nusers:\n- name: u\n  user:\n" + user
}

const runPath = "/apis/kruntimes.io/v1alpha1/namespaces/a/runs/hello"

func TestAFunctionIsLookedUpOnceAndAgainAfterA404(t *testing.T) {
	answer := 200
	gw, gwCalls := fake(t, func(w http.ResponseWriter, r *http.Request) {
		if answer != 200 {
			writeError(w, answer, "NotFound")
			return
		}
		writeJSON(w, 200, map[string]any{"message": "hi"})
	})
	endpoint := gw.URL + "/v1/namespaces/a/runtimes/python/runs/u-1:invoke"
	kube, kubeCalls := fake(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, kubeRun("Ready", "function", endpoint, gw))
	})
	c, err := NewFromKubeconfig(writeKubeconfig(t, kube, contextFor("    token: tok-1\n")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace() != "a" {
		t.Errorf("namespace %q", c.Namespace())
	}
	fn, ctx := c.Function("hello"), context.Background()
	var out map[string]string
	for range 2 {
		if err := fn.Invoke(ctx, map[string]string{"name": "x"}, &out); err != nil || out["message"] != "hi" {
			t.Fatal(out, err)
		}
	}
	answer = 404
	var nf *NotFoundError
	if err := fn.Invoke(ctx, nil, nil); !errors.As(err, &nf) || nf.Source != "gateway" {
		t.Fatal(err)
	}
	answer = 200
	if err := fn.Invoke(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if k, g := len(kubeCalls.all()), len(gwCalls.all()); k != 2 || g != 4 {
		t.Errorf("%d lookups, %d invokes", k, g)
	}
	for _, r := range append(kubeCalls.all(), gwCalls.all()...) {
		if r.Header.Get("Authorization") != "Bearer tok-1" {
			t.Errorf("%s %s: %q", r.Method, r.URL, r.Header.Get("Authorization"))
		}
	}
}

// createSandboxOn runs CreateSandbox (Run "hello" of namespace a) against a
// fake API server that echoes the create, answers every GET with run and
// hands every other request (DELETE, PATCH) to other.
func createSandboxOn(t *testing.T, ctx context.Context, run map[string]any, other http.HandlerFunc) error {
	t.Helper()
	kube, _ := fake(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(201)
			_, _ = w.Write(b)
		case http.MethodGet:
			writeJSON(w, 200, run)
		default:
			other(w, r)
		}
	})
	c, err := NewFromKubeconfig(writeKubeconfig(t, kube, contextFor("    token: t\n")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSandbox(ctx, SandboxOptions{Name: "hello"})
	return err
}

// kubeStatus is the API server's Status document for code and reason.
func kubeStatus(code int, reason string) map[string]any {
	return map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"reason": reason, "code": code, "message": strings.ToLower(reason)}
}

// sessionRun is a session Run in phase with status reason and message.
func sessionRun(phase, reason, message string) map[string]any {
	run := kubeRun(phase, "session", "")
	status := run["status"].(map[string]any)
	status["reason"], status["message"] = reason, message
	return run
}

func TestASandboxThatEndsBeforeReadyIsDeleted(t *testing.T) {
	var deletes []string
	err := createSandboxOn(t, context.Background(), sessionRun("Failed", "RegistrationFailed", "no bash"),
		func(w http.ResponseWriter, r *http.Request) {
			deletes = append(deletes, r.Method+" "+r.URL.Path)
			writeJSON(w, 200, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Success"})
		})
	var ended *RunEndedError
	if !errors.As(err, &ended) || ended.Reason != "RegistrationFailed" {
		t.Fatal(err)
	}
	if len(deletes) != 1 || deletes[0] != "DELETE /apis/kruntimes.io/v1alpha1/namespaces/a/runs/hello" {
		t.Errorf("deletes %v", deletes)
	}
}

func TestASandboxThatWaitsTooLongSaysWhyAndIsDeletedEvenIfAlreadyGone(t *testing.T) {
	var others []string
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := createSandboxOn(t, ctx,
		sessionRun("Pending", "NoIdlePod", "0/2 bash Pods can take this session: 2 busy (a session needs an idle Pod)"),
		func(w http.ResponseWriter, r *http.Request) {
			others = append(others, r.Method)
			writeJSON(w, 404, kubeStatus(404, "NotFound"))
		})
	var timeout *WaitTimeoutError
	if !errors.As(err, &timeout) || timeout.Phase != "Pending" || timeout.Reason != "NoIdlePod" {
		t.Fatal(err)
	}
	want := "(phase Pending, NoIdlePod: 0/2 bash Pods can take this session: 2 busy (a session needs an idle Pod))"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%q lacks %q", err.Error(), want)
	}
	if len(others) != 1 || others[0] != http.MethodDelete {
		t.Errorf("requests after the wait: %v", others)
	}
}

func TestACallerWhoMayNotDeleteRunsStillEndsTheSandboxThatNeverCameUp(t *testing.T) {
	var others []string
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := createSandboxOn(t, ctx, sessionRun("Pending", "", ""), func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			others = append(others, r.Method)
			writeJSON(w, 403, kubeStatus(403, "Forbidden"))
			return
		}
		b, _ := io.ReadAll(r.Body)
		others = append(others, r.Method+" "+string(b))
		writeJSON(w, 200, kubeRun("Cancelled", "session", ""))
	})
	var timeout *WaitTimeoutError
	if !errors.As(err, &timeout) {
		t.Fatal(err)
	}
	want := []string{"DELETE", `PATCH {"spec":{"termination":{"mode":"Immediate"}}}`}
	if !slices.Equal(others, want) {
		t.Errorf("requests after the wait: %q, want %q", others, want)
	}
}

// pki is a CA with a server certificate for 127.0.0.1 and a client one.
type pki struct {
	caPEM                 []byte
	server                tls.Certificate
	clientCert, clientKey []byte
}

func newPKI(t *testing.T) pki {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, []byte) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	sc, sk := leaf(2, "server", x509.ExtKeyUsageServerAuth)
	if p.server, err = tls.X509KeyPair(sc, sk); err != nil {
		t.Fatal(err)
	}
	p.clientCert, p.clientKey = leaf(3, "kruntimes-sdk-test-user", x509.ExtKeyUsageClientAuth)
	return p
}

func TestAClientCertificateUserPresentsItsCertificate(t *testing.T) {
	p := newPKI(t)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.caPEM)
	var peers []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peers = append(peers, r.TLS.PeerCertificates[0].Subject.CommonName)
		writeJSON(w, 200, kubeRun("Ready", "function", "https://gw/x:invoke"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots}
	srv.StartTLS()
	defer srv.Close()
	b64 := base64.StdEncoding.EncodeToString
	user := fmt.Sprintf("    client-certificate-data: %s\n    client-key-data: %s\n", b64(p.clientCert), b64(p.clientKey))
	cfg := filepath.Join(t.TempDir(), "config")
	doc := fmt.Sprintf("apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n%s",
		srv.URL, b64(p.caPEM), contextFor(user))
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewFromKubeconfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.GetRun(context.Background(), "hello")
	if err != nil || run.UID != "u-1" || run.Endpoint != "https://gw/x:invoke" {
		t.Fatal(run, err)
	}
	if strings.Join(peers, ",") != "kruntimes-sdk-test-user" {
		t.Errorf("peers %v", peers)
	}
}

func TestAnExecPluginTokenReachesTheAPIAndTheGatewayAndIsCached(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	script := filepath.Join(dir, "plugin.sh")
	plugin := fmt.Sprintf("#!/bin/sh\nn=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %s\n"+
		`printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"exec-%%s"}}' $n`+"\n", count, count)
	if err := os.WriteFile(script, []byte(plugin), 0o700); err != nil {
		t.Fatal(err)
	}
	gw, gwCalls := fake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, 1) })
	kube, kubeCalls := fake(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, kubeRun("Ready", "function", gw.URL+"/v1/namespaces/a/runtimes/python/runs/u-1:invoke", gw))
	})
	user := fmt.Sprintf("    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: %s\n      interactiveMode: Never\n", script)
	c, err := NewFromKubeconfig(writeKubeconfig(t, kube, contextFor(user)))
	if err != nil {
		t.Fatal(err)
	}
	fn := c.Function("hello")
	for range 3 {
		if err := fn.Invoke(context.Background(), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range append(kubeCalls.all(), gwCalls.all()...) {
		if r.Header.Get("Authorization") != "Bearer exec-1" {
			t.Errorf("%s: %q", r.URL, r.Header.Get("Authorization"))
		}
	}
	if n, _ := os.ReadFile(count); strings.TrimSpace(string(n)) != "1" {
		t.Errorf("the plugin ran %s times", n)
	}
}

func TestTheStateDirStoreWritesAndTerminatesManifests(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	_ = os.Mkdir(runs, 0o755)
	_ = os.WriteFile(filepath.Join(dir, "runs.json"), []byte(`{"runs":[{"name":"s","namespace":"default","uid":"u","runtime":"bash","mode":"session","phase":"Ready","endpoint":"e"}]}`), 0o644)
	store := &stateDirRuns{stateDir: dir, runsDir: runs}
	ctx := context.Background()
	run, err := store.get(ctx, "default", "s")
	if err != nil || run.UID != "u" || run.Mode != "session" || run.Endpoint != "e" {
		t.Fatal(run, err)
	}
	var nf *NotFoundError
	if _, err := store.get(ctx, "default", "other"); !errors.As(err, &nf) || nf.Status != 404 {
		t.Error(err)
	}
	m := sessionManifest("n", "default", SandboxOptions{Env: map[string]string{"B": "2", "A": "1"}, QueueSize: 4, Timeout: time.Minute})
	if err := store.create(ctx, m); err != nil {
		t.Fatal(err)
	}
	var conflict *ConflictError
	if err := store.create(ctx, m); !errors.As(err, &conflict) {
		t.Error(err)
	}
	// A Run krt up serves from a file of its own (krt up --runs) is not created twice.
	if err := store.create(ctx, sessionManifest("s", "default", SandboxOptions{})); !errors.As(err, &conflict) ||
		!strings.Contains(err.Error(), "phase Ready") {
		t.Error(err)
	}
	if err := store.terminate(ctx, "default", "n", "Drain"); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(runs, "session-default-n.yaml"))
	for _, want := range []string{`"termination": {`, `"mode": "Drain"`, `"queueSize": 4`, `"timeout": 60`, `"name": "A"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("manifest lacks %s:\n%s", want, raw)
		}
	}
	if err := store.terminate(ctx, "default", "not-mine", "Drain"); !errors.Is(err, ErrUnsupported) {
		t.Error(err)
	}
	for range 2 { // the second finds it already gone: no error
		if err := store.delete(ctx, "default", "n"); err != nil {
			t.Fatal(err)
		}
	}
	if entries, _ := os.ReadDir(runs); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

func TestAStateDirNoKrtUpHoldsIsRefusedInWords(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "client.json"), []byte(`{"gateway":"https://127.0.0.1:1","token":"t"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := NewFromStateDir(dir)
		if !errors.Is(err, ErrNoStack) || !strings.Contains(err.Error(), "no krt up running for "+dir) {
			t.Fatalf("%v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "krt-up.lock"), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	held, err := os.Open(filepath.Join(dir, "krt-up.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFromStateDir(dir); err != nil {
		t.Fatal(err)
	}
}
