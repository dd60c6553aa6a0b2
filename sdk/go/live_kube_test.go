package kruntimes_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	kruntimes "kruntimes.io/sdk"
)

// dynamicAs is a Kubernetes client with the kubeconfig in variable name.
func dynamicAs(t *testing.T, name string) dynamic.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env(t, name))
	if err != nil {
		t.Fatal(err)
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var runs = schema.GroupVersionResource{Group: "kruntimes.io", Version: "v1alpha1", Resource: "runs"}

func TestLiveASandboxIsARunCreatedThroughTheAPI(t *testing.T) {
	kubernetesOnly(t)
	s := sandbox(t, kruntimes.SandboxOptions{IdleTimeout: 10 * time.Minute, QueueSize: 4,
		OperationTimeout: time.Minute, Timeout: time.Hour})
	ctx := timeout(t, time.Minute)
	api := dynamicAs(t, "KRT_TEST_KUBECONFIG").Resource(runs).Namespace(s.Namespace())
	obj, err := api.Get(ctx, s.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	session, _, _ := unstructured.NestedMap(obj.Object, "spec", "mode", "session")
	lifetime, _, _ := unstructured.NestedInt64(obj.Object, "spec", "timeout")
	if string(obj.GetUID()) != s.UID() || session["idleTimeoutSeconds"] != int64(600) || session["queueSize"] != int64(4) ||
		session["operationTimeout"] != int64(60) || lifetime != 3600 {
		t.Errorf("%v", obj.Object["spec"])
	}
	if !strings.Contains(s.Run().CABundle, "BEGIN CERTIFICATE") || !strings.HasPrefix(s.Endpoint(), env(t, "KRT_TEST_GATEWAY")) {
		t.Errorf("%+v", s.Run())
	}
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	obj, err = api.Get(ctx, s.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mode, _, _ := unstructured.NestedString(obj.Object, "spec", "termination", "mode")
	reason, _, _ := unstructured.NestedString(obj.Object, "status", "reason")
	if mode != "Drain" || reason != "Drained" {
		t.Errorf("termination %q, reason %q", mode, reason)
	}
}

func TestLiveAnExecCredentialPluginAuthenticatesToTheAPIAndTheGateway(t *testing.T) {
	kubernetesOnly(t)
	count := env(t, "KRT_TEST_EXEC_COUNT")
	runsOfPlugin := func() string { b, _ := os.ReadFile(count); return strings.TrimSpace(string(b)) }
	before := runsOfPlugin()
	c, err := kruntimes.NewFromKubeconfig(env(t, "KRT_TEST_KUBECONFIG_EXEC"), kruntimes.WithNamespace(env(t, "KRT_TEST_NAMESPACE")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, time.Minute)
	fn := c.Function(env(t, "KRT_TEST_FUNCTION"))
	for range 3 {
		var out greeting
		if err := fn.Invoke(ctx, map[string]string{"name": "exec"}, &out); err != nil || out.Message != "hello exec" {
			t.Fatal(out, err)
		}
	}
	s, err := c.CreateSandbox(ctx, kruntimes.SandboxOptions{Runtime: env(t, "KRT_TEST_SESSION_RUNTIME")})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Commands.Run(ctx, kruntimes.Shell("echo via-exec")); err != nil || r.Stdout != "via-exec\n" {
		t.Fatal(r, err)
	}
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if after := runsOfPlugin(); after == before {
		t.Errorf("the plugin never ran (%s)", after)
	} else {
		t.Logf("plugin runs: %q → %q", before, after)
	}
}

func TestLiveAKubeconfigTokenTheAPIServerRejectsIsUnauthenticated(t *testing.T) {
	kubernetesOnly(t)
	text, err := os.ReadFile(env(t, "KRT_TEST_KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	bad := regexp.MustCompile(`(?m)^    token: .*$`).ReplaceAll(text, []byte("    token: kt-not-a-token"))
	path := filepath.Join(t.TempDir(), "bad.kubeconfig")
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := kruntimes.NewFromKubeconfig(path, kruntimes.WithNamespace(env(t, "KRT_TEST_NAMESPACE")))
	if err != nil {
		t.Fatal(err)
	}
	var unauth *kruntimes.UnauthenticatedError
	if err := c.Function(env(t, "KRT_TEST_FUNCTION")).Invoke(timeout(t, time.Minute), nil, nil); !errors.As(err, &unauth) ||
		unauth.Status != 401 || unauth.Source != "kubernetes" {
		t.Errorf("%v", err)
	}
}

func TestLiveADeletedRoleBindingIsRefusedWithinTheAllowedTTL(t *testing.T) {
	kubernetesOnly(t)
	ns := env(t, "KRT_TEST_NAMESPACE")
	carol, err := kruntimes.NewFromKubeconfig(env(t, "KRT_TEST_KUBECONFIG_CAROL"), kruntimes.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, 2*time.Minute)
	fn := carol.Function(env(t, "KRT_TEST_FUNCTION"))
	if err := fn.Invoke(ctx, map[string]string{"name": "carol"}, nil); err != nil {
		t.Fatal(err)
	}
	bindings := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	err = dynamicAs(t, "KRT_TEST_KUBECONFIG_ADMIN").Resource(bindings).Namespace(ns).
		Delete(ctx, env(t, "KRT_TEST_REVOKE_BINDING"), metav1.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for {
		err := fn.Invoke(ctx, map[string]string{"name": "carol"}, nil)
		var denied *kruntimes.PermissionDeniedError
		if errors.As(err, &denied) {
			t.Logf("refused %v after the RoleBinding was deleted", time.Since(revoked).Round(time.Second))
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(revoked) > 40*time.Second {
			t.Fatal("still allowed past the allowed TTL (30 s)")
		}
		time.Sleep(500 * time.Millisecond)
	}
}
