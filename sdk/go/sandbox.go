package kruntimes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// SandboxOptions describes a session Run to create.
type SandboxOptions struct {
	// Runtime of the Run (default "bash").
	Runtime string
	// Name of the Run (default "sandbox-<random>"); Namespace defaults to
	// the client's.
	Name, Namespace string
	// Env is the session's environment.
	Env map[string]string
	// IdleTimeout, QueueSize and OperationTimeout are the Run's
	// spec.mode.session fields (0: the Run's defaults); Timeout is its
	// spec.timeout, the total lifetime.
	IdleTimeout      time.Duration
	QueueSize        int
	OperationTimeout time.Duration
	Timeout          time.Duration
}

// SessionStatus is the session's own view (it bypasses the queue).
type SessionStatus struct {
	UID               string `json:"uid"`
	Attempt           int64  `json:"attempt"`
	PendingOperations int64  `json:"pendingOperations"`
	IdleMs            int64  `json:"idleMs"`
	Closing           bool   `json:"closing"`
}

// SandboxMetrics is what the session uses now (GET …/metrics; it bypasses
// the queue).
type SandboxMetrics struct {
	// CPUSeconds is the CPU its commands' and background processes' trees
	// used; two readings apart give a rate.
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUCount is the CPUs the Runtime Server may use.
	CPUCount int `json:"cpuCount"`
	// MemoryBytes is their resident memory now; MemoryLimitBytes the Pod's
	// (cgroup's) limit, nil without one.
	MemoryBytes      int64  `json:"memoryBytes"`
	MemoryLimitBytes *int64 `json:"memoryLimitBytes"`
	// Processes is its processes running now.
	Processes int `json:"processes"`
	// DiskBytes is the size of the workspace's regular files, a floor when
	// DiskPartial (the walk stopped past 100,000 entries).
	DiskBytes   int64 `json:"diskBytes"`
	DiskPartial bool  `json:"diskPartial"`
	// DiskTotalBytes and DiskFreeBytes are the workspace's file system.
	DiskTotalBytes int64 `json:"diskTotalBytes"`
	DiskFreeBytes  int64 `json:"diskFreeBytes"`
}

// Sandbox is a session-mode Run: Commands, Files and PTY, ended by Close or
// Kill.
type Sandbox struct {
	// Commands runs commands, and background processes.
	Commands *Commands
	// Files reads and changes the workspace.
	Files *Files
	// PTY runs processes on terminals.
	PTY *PTY

	c   *Client
	run RunInfo
}

func newSandbox(c *Client, run RunInfo) *Sandbox {
	s := &Sandbox{c: c, run: run}
	s.Commands = &Commands{s: s}
	s.Files = &Files{s: s}
	s.PTY = &PTY{s: s}
	return s
}

// Default bounds of the waits when the context has no deadline.
const (
	defaultReadyWait = 60 * time.Second
	defaultEndWait   = 120 * time.Second
)

func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// CreateSandbox creates a session Run and waits until it is Ready and routed
// (the context bounds the wait; without a deadline, 60 s). A Run that never
// gets there is deleted before the error is returned; a *WaitTimeoutError
// says why it still waited.
func (c *Client) CreateSandbox(ctx context.Context, o SandboxOptions) (*Sandbox, error) {
	store, err := c.store()
	if err != nil {
		return nil, err
	}
	ns, name := or(o.Namespace, c.namespace), o.Name
	if name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name = "sandbox-" + hex.EncodeToString(b[:])
	}
	if err := store.create(ctx, sessionManifest(name, ns, o)); err != nil {
		return nil, err
	}
	s, err := c.ready(ctx, store, ns, name)
	if err != nil {
		// Never leave a half-made sandbox behind: deleted, it holds no Pod and waits for none.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if store.delete(cleanup, ns, name) != nil {
			// A caller who may not delete Runs still ends it, so it holds no Pod.
			_ = store.terminate(cleanup, ns, name, "Immediate")
		}
		return nil, err
	}
	return s, nil
}

// ConnectSandbox attaches to the existing session Run name, waiting (as
// CreateSandbox) until it is Ready.
func (c *Client) ConnectSandbox(ctx context.Context, name string) (*Sandbox, error) {
	store, err := c.store()
	if err != nil {
		return nil, err
	}
	run, err := c.lookup(ctx, name, "session")
	if err != nil {
		return nil, err
	}
	return c.ready(ctx, store, run.Namespace, name)
}

// ConnectSandboxAt attaches to the session at endpoint
// (…/v1/namespaces/NS/runtimes/RT/sessions/UID); it cannot be closed by this
// client.
func (c *Client) ConnectSandboxAt(ctx context.Context, endpoint string) (*Sandbox, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	p := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(p) != 7 || p[0] != "v1" || p[1] != "namespaces" || p[3] != "runtimes" || p[5] != "sessions" {
		return nil, fmt.Errorf("%s is not a session endpoint (…/v1/namespaces/NS/runtimes/RT/sessions/UID)", endpoint)
	}
	s := newSandbox(c, RunInfo{Namespace: p[2], Runtime: p[4], UID: p[6], Mode: "session", Phase: "Ready",
		Endpoint: strings.TrimRight(endpoint, "/")})
	ctx, cancel := bounded(ctx, defaultReadyWait)
	defer cancel()
	return s, s.routed(ctx)
}

func (c *Client) ready(ctx context.Context, store runStore, ns, name string) (*Sandbox, error) {
	ctx, cancel := bounded(ctx, defaultReadyWait)
	defer cancel()
	run, err := waitFor(ctx, c.logger, store, ns, name, "Ready", func(r *RunInfo) bool { return r.Phase == "Ready" && r.Endpoint != "" })
	if err != nil {
		return nil, err
	}
	s := newSandbox(c, *run)
	return s, s.routed(ctx)
}

// routed waits until the gateway routes the session: its status route is
// read-only and bypasses the queue, so probing it cannot run anything.
func (s *Sandbox) routed(ctx context.Context) error {
	for {
		_, err := s.Status(ctx)
		var nr *NotReadyError
		var ou *OwnerUnavailableError
		if err == nil || !(errors.As(err, &nr) || errors.As(err, &ou)) {
			return err
		}
		if sleep(ctx, 50*time.Millisecond) != nil {
			return err
		}
	}
}

// Name is the session Run's name ("" when connected by endpoint).
func (s *Sandbox) Name() string { return s.run.Name }

// Namespace is the Run's namespace.
func (s *Sandbox) Namespace() string { return s.run.Namespace }

// UID is the Run's UID.
func (s *Sandbox) UID() string { return s.run.UID }

// Endpoint is the session's base URL at the gateway.
func (s *Sandbox) Endpoint() string { return s.run.Endpoint }

// Run is the Run as last seen (after Close or Kill: its terminal status).
func (s *Sandbox) Run() RunInfo { return s.run }

// Status is the session's own view.
func (s *Sandbox) Status(ctx context.Context) (*SessionStatus, error) {
	var st SessionStatus
	err := s.c.gw.json(ctx, request{method: http.MethodGet, url: s.run.Endpoint, caPEM: s.run.CABundle}, nil, &st)
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// GetMetrics is what the session uses now: CPU, memory, processes, the
// workspace and its file system. Errors are typed as for any call.
func (s *Sandbox) GetMetrics(ctx context.Context) (*SandboxMetrics, error) {
	var m SandboxMetrics
	err := s.c.gw.json(ctx, request{method: http.MethodGet, url: s.run.Endpoint + "/metrics", caPEM: s.run.CABundle}, nil, &m)
	if err != nil {
		return nil, err
	}
	return &m, nil
}

// Close ends the session once its accepted operations finish
// (spec.termination Drain) and waits until the Run ends (Succeeded); the
// context bounds the wait (without a deadline, 120 s).
func (s *Sandbox) Close(ctx context.Context) (RunInfo, error) { return s.end(ctx, "Drain") }

// Kill ends the session now, cancelling queued and running work
// (spec.termination Immediate; Cancelled).
func (s *Sandbox) Kill(ctx context.Context) (RunInfo, error) { return s.end(ctx, "Immediate") }

func (s *Sandbox) end(ctx context.Context, mode string) (RunInfo, error) {
	if s.run.Name == "" {
		return s.run, fmt.Errorf("%w: a sandbox connected by endpoint cannot be ended by this client", ErrUnsupported)
	}
	store, err := s.c.store()
	if err != nil {
		return s.run, err
	}
	ctx, cancel := bounded(ctx, defaultEndWait)
	defer cancel()
	if err := store.terminate(ctx, s.run.Namespace, s.run.Name, mode); err != nil {
		return s.run, err
	}
	run, err := waitFor(ctx, s.c.logger, store, s.run.Namespace, s.run.Name, "its end", func(r *RunInfo) bool { return r.Ended() })
	if err != nil {
		return s.run, err
	}
	s.run = *run
	return s.run, nil
}

func (s *Sandbox) post(ctx context.Context, route string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return s.c.gw.do(ctx, request{method: http.MethodPost, url: s.run.Endpoint + "/" + route,
		body: bytes.NewReader(b), header: http.Header{"Content-Type": {"application/json"}}, caPEM: s.run.CABundle})
}

// operation runs one queued operation and decodes its result.
func (s *Sandbox) operation(ctx context.Context, route string, body any, out *CommandResult) error {
	return s.c.gw.json(ctx, request{method: http.MethodPost, url: s.run.Endpoint + "/" + route, caPEM: s.run.CABundle},
		body, out)
}
