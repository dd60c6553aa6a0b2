package kruntimes_test

// The live suite: the SDK against a stack the Rust drivers start
// (krt/tests/sdk_go.rs), named by KRT_TEST_* variables: KRT_TEST_MODE is
// "embedded" (krt up, KRT_TEST_STATE_DIR) or "kubernetes" (the API server
// harness, a kubeconfig per user). Without KRT_TEST_MODE these tests skip.

import (
	"context"
	"os"
	"testing"
	"time"

	kruntimes "kruntimes.io/sdk"
)

func mode(t *testing.T) string {
	t.Helper()
	m := os.Getenv("KRT_TEST_MODE")
	if m == "" {
		t.Skip("live: KRT_TEST_MODE is not set (krt/tests/sdk_go.rs sets it)")
	}
	return m
}

func kubernetesOnly(t *testing.T) {
	t.Helper()
	if mode(t) != "kubernetes" {
		t.Skip("kubernetes only: needs the API server harness")
	}
}

func env(t *testing.T, name string) string {
	t.Helper()
	mode(t)
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run this suite through krt/tests/sdk_go.rs", name)
	}
	return v
}

// client is a client of the stack as the default user, or as "bob" (who may
// neither invoke nor use sessions).
func client(t *testing.T, who string, opts ...kruntimes.Option) *kruntimes.Client {
	t.Helper()
	opts = append([]kruntimes.Option{kruntimes.WithNamespace(env(t, "KRT_TEST_NAMESPACE"))}, opts...)
	var c *kruntimes.Client
	var err error
	if mode(t) == "embedded" {
		if who == "bob" {
			opts = append(opts, kruntimes.WithToken(env(t, "KRT_TEST_FORBIDDEN_TOKEN")))
		}
		c, err = kruntimes.NewFromStateDir(env(t, "KRT_TEST_STATE_DIR"), opts...)
	} else {
		kubeconfig := env(t, "KRT_TEST_KUBECONFIG")
		if who == "bob" {
			kubeconfig = env(t, "KRT_TEST_KUBECONFIG_BOB")
		}
		c, err = kruntimes.NewFromKubeconfig(kubeconfig, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// explicit is a client of the gateway alone, with a token that may do everything.
func explicit(t *testing.T) *kruntimes.Client {
	t.Helper()
	c, err := kruntimes.New(env(t, "KRT_TEST_GATEWAY"), env(t, "KRT_TEST_TOKEN"),
		kruntimes.WithCAFile(env(t, "KRT_TEST_GATEWAY_CA")))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

type greeting struct {
	Message string `json:"message"`
	PID     int    `json:"pid"`
}
