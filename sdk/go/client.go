package kruntimes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
)

// Client reaches the gateway and, unless made with New, the control plane
// where Runs are looked up and created. It is safe for concurrent use.
type Client struct {
	// Tasks runs task Runs.
	Tasks *Tasks
	// Artifacts reads the files task Runs left behind.
	Artifacts *Artifacts

	namespace string
	gateway   string
	runs      runStore
	gw        *gateway
	logger    *slog.Logger
}

type options struct {
	namespace   string
	token       string
	caFile      string
	kubeContext string
	logger      *slog.Logger
}

// Option configures a Client.
type Option func(*options)

// WithNamespace sets the namespace Runs are looked up and created in
// (default: the kubeconfig context's, else "default").
func WithNamespace(ns string) Option { return func(o *options) { o.namespace = ns } }

// WithToken sets the bearer token sent to the gateway, replacing the state
// dir's or the kubeconfig user's (a user with a client certificate only, or a
// gateway with its own --token-audiences).
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithCAFile trusts the CA in this PEM file for the gateway: with New, or for
// Runs whose status carries no CA bundle.
func WithCAFile(path string) Option { return func(o *options) { o.caFile = path } }

// WithKubeContext picks a kubeconfig context other than the current one.
func WithKubeContext(name string) Option { return func(o *options) { o.kubeContext = name } }

// WithLogger logs the client's long waits (a sandbox coming up or ending:
// up to minutes while a Runtime scales up) to l at Info, once a second has
// passed and at each change of where the Run stands — WithLogger(slog.Default())
// prints them on stderr. Without it the client logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

func staticToken(token string) func(http.RoundTripper) (http.RoundTripper, error) {
	return func(rt http.RoundTripper) (http.RoundTripper, error) {
		if token == "" {
			return rt, nil
		}
		return transport.NewBearerAuthRoundTripper(token, rt), nil
	}
}

// New is a client of the gateway alone: functions and sandboxes are
// addressed by endpoint URL (Run.status.endpoint.url), with FunctionAt and
// ConnectSandboxAt.
func New(gatewayURL, token string, opts ...Option) (*Client, error) {
	o := collect(opts)
	gw, err := newGateway(o.caFile, staticToken(token))
	if err != nil {
		return nil, err
	}
	return withTasks(&Client{namespace: or(o.namespace, "default"), gateway: strings.TrimRight(gatewayURL, "/"), gw: gw, logger: o.logger}), nil
}

// NewFromStateDir is a client of the krt up stack whose state directory is
// dir: the gateway, CA and token of client.json, Runs from runs.json,
// sandboxes created as manifests in its runs directory.
func NewFromStateDir(dir string, opts ...Option) (*Client, error) {
	o := collect(opts)
	if !stackRunning(dir) {
		return nil, fmt.Errorf("%w for %s (start one with `krt --state-dir %s up`): its state files describe a stack that is gone", ErrNoStack, dir, dir)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "client.json"))
	if err != nil {
		return nil, fmt.Errorf("read client.json (is `krt up` running with this state dir?): %w", err)
	}
	var cfg struct {
		Gateway, CAFile, Token, RunsDir string
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, "client.json"), err)
	}
	gw, err := newGateway(or(o.caFile, cfg.CAFile), staticToken(or(o.token, cfg.Token)))
	if err != nil {
		return nil, err
	}
	return withTasks(&Client{
		namespace: or(o.namespace, "default"),
		gateway:   strings.TrimRight(cfg.Gateway, "/"),
		runs:      &stateDirRuns{stateDir: dir, runsDir: cfg.RunsDir},
		gw:        gw,
		logger:    o.logger,
	}), nil
}

// NewFromKubeconfig is a client of the cluster of the kubeconfig at path
// ("": $KUBECONFIG, ~/.kube/config, else the in-cluster service account).
// Runs are read and created through the Kubernetes API as its user, whose
// credentials (token, token file, exec plugin) also reach the gateway.
func NewFromKubeconfig(path string, opts ...Option) (*Client, error) {
	o := collect(opts)
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: o.kubeContext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if o.namespace == "" {
		if ns, _, err := cc.Namespace(); err == nil {
			o.namespace = ns
		}
	}
	return fromRESTConfig(cfg, o)
}

// NewFromRESTConfig is NewFromKubeconfig for a rest.Config a program already
// has (a controller's).
func NewFromRESTConfig(cfg *rest.Config, opts ...Option) (*Client, error) {
	return fromRESTConfig(cfg, collect(opts))
}

func fromRESTConfig(cfg *rest.Config, o options) (*Client, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	auth := staticToken(o.token)
	if o.token == "" {
		// The user's own credentials: a token, a token file (re-read as it
		// rotates) or an exec plugin (refreshed when it expires).
		tc, err := cfg.TransportConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig credentials: %w", err)
		}
		auth = func(rt http.RoundTripper) (http.RoundTripper, error) {
			return transport.HTTPWrappersForConfig(tc, rt)
		}
	}
	gw, err := newGateway(o.caFile, auth)
	if err != nil {
		return nil, err
	}
	return withTasks(&Client{namespace: or(o.namespace, "default"), runs: &kubeRuns{dyn: dyn}, gw: gw, logger: o.logger}), nil
}

func withTasks(c *Client) *Client {
	c.Tasks = &Tasks{c: c}
	c.Artifacts = &Artifacts{c: c}
	return c
}

// Namespace is where Runs are looked up and created.
func (c *Client) Namespace() string { return c.namespace }

// Gateway is the gateway's base URL when the client knows it (state dir,
// New); a cluster's Runs name theirs.
func (c *Client) Gateway() string { return c.gateway }

// GetRun is the Run's status as its control plane reports it.
func (c *Client) GetRun(ctx context.Context, name string) (*RunInfo, error) {
	store, err := c.store()
	if err != nil {
		return nil, err
	}
	return store.get(ctx, c.namespace, name)
}

func (c *Client) store() (runStore, error) {
	if c.runs == nil {
		return nil, fmt.Errorf("%w: this client knows only the gateway (address Runs by endpoint, or use NewFromKubeconfig / NewFromStateDir)", ErrUnsupported)
	}
	return c.runs, nil
}

// lookup is the Run name of mode in the client's namespace.
func (c *Client) lookup(ctx context.Context, name, mode string) (*RunInfo, error) {
	store, err := c.store()
	if err != nil {
		return nil, err
	}
	run, err := store.get(ctx, c.namespace, name)
	if err != nil {
		return nil, err
	}
	if run.Mode != mode {
		return nil, typed(APIError{Status: 404, Code: "NotFound", Source: store.source(),
			Message: fmt.Sprintf("run %s/%s is a %s Run, not a %s Run", c.namespace, name, or(run.Mode, "task"), mode)})
	}
	return run, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ErrNoStack is returned by NewFromStateDir for a state directory no krt up
// runs with (errors.Is).
var ErrNoStack = errors.New("kruntimes: no krt up running")

// stackRunning reports whether a krt up holds dir: it keeps an exclusive
// flock on krt-up.lock for its whole life, so a shared one is refused
// exactly while it runs.
func stackRunning(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "krt-up.lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	return false
}
