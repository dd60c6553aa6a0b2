package kruntimes

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// phases answers the Run in the phase its clock and its count of reads
// since then say.
type phases struct {
	start time.Time
	late  int
	at    func(time.Duration, int) RunInfo
}

func (p *phases) get(context.Context, string, string) (*RunInfo, error) {
	d := time.Since(p.start)
	if d >= 1100*time.Millisecond {
		p.late++
	}
	r := p.at(d, p.late)
	return &r, nil
}
func (p *phases) create(context.Context, map[string]any) error            { return nil }
func (p *phases) terminate(context.Context, string, string, string) error { return nil }
func (p *phases) delete(context.Context, string, string) error            { return nil }
func (p *phases) source() string                                          { return "client" }

func TestALongWaitIsLoggedAtEachChangeAndAQuickOneNot(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	// Pending past the quiet second, then Running for one read, then Ready.
	store := &phases{start: time.Now(), at: func(_ time.Duration, late int) RunInfo {
		switch late {
		case 0, 1:
			return RunInfo{Phase: "Pending", Reason: "NoIdlePod", Message: "0/2 idle"}
		case 2:
			return RunInfo{Phase: "Running", Reason: "Registering"}
		default:
			return RunInfo{Phase: "Ready"}
		}
	}}
	ready := func(r *RunInfo) bool { return r.Phase == "Ready" }
	if _, err := waitFor(context.Background(), log, store, "a", "box", "Ready", ready); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "phase Pending, NoIdlePod: 0/2 idle") ||
		!strings.Contains(lines[1], "phase Running, Registering") || !strings.Contains(lines[0], "run=a/box") {
		t.Errorf("%q", lines)
	}
	buf.Reset()
	quick := &phases{start: time.Now(), at: func(time.Duration, int) RunInfo { return RunInfo{Phase: "Ready"} }}
	if _, err := waitFor(context.Background(), log, quick, "a", "box", "Ready", ready); err != nil || buf.Len() != 0 {
		t.Errorf("%v %q", err, buf.String())
	}
}
