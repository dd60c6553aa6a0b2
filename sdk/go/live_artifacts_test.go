package kruntimes_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	kruntimes "kruntimes.io/sdk"
)

// artifactsScript writes a report and a nested 3 MB file into the task's
// artifacts directory.
const artifactsScript = `set -e
cd "$KRUNTIME_ARTIFACTS_DIR"
mkdir -p out/deep
printf 'hello artifacts' > report.txt
head -c 3000000 /dev/urandom > out/deep/blob.bin
`

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// On krt up every Runtime exports to STATE_DIR/artifacts: a Bash task's two
// files are listed, read whole and by ranges, downloaded and compared by
// SHA-256; a missing name is a *NotFoundError. On the API server harness no
// Runtime has a store and the SDK's Role does not grant runs/artifacts:
// reading a task's artifacts there is refused (403).
func TestLiveATasksArtifactsAreListedReadAndDownloaded(t *testing.T) {
	c := client(t, "")
	ctx := timeout(t, 2*time.Minute)
	ns := env(t, "KRT_TEST_NAMESPACE")
	if mode(t) != "embedded" {
		r, err := c.Tasks.Run(ctx, kruntimes.TaskOptions{Runtime: python, Inline: "print('no artifacts here')",
			Name: "go-artifacts"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Tasks.Delete(context.Background(), r.Name)
		var denied *kruntimes.PermissionDeniedError
		if _, err := c.Artifacts.List(ctx, "", r.Name); !errors.As(err, &denied) || denied.Status != 403 || denied.Source != "gateway" {
			t.Fatalf("%T %v", err, err)
		}
		if len(r.Artifacts) != 0 {
			t.Errorf("%+v", r.Artifacts)
		}
		return
	}
	r, err := c.Tasks.Run(ctx, kruntimes.TaskOptions{Runtime: env(t, "KRT_TEST_SESSION_RUNTIME"), Inline: artifactsScript,
		Name: "go-artifacts"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Tasks.Delete(context.Background(), r.Name)
	if !r.OK() {
		t.Fatalf("%+v", r)
	}
	// status.artifacts, on the result.
	byName := map[string]kruntimes.ArtifactRef{}
	for _, a := range r.Artifacts {
		byName[a.Name] = a
	}
	if len(byName) != 2 || byName["report.txt"].Size != 15 || byName["report.txt"].SHA256 != sha256Hex([]byte("hello artifacts")) ||
		byName["out/deep/blob.bin"].Size != 3_000_000 {
		t.Fatalf("%+v", r.Artifacts)
	}

	// The gateway's list: the same refs.
	listed, err := c.Artifacts.List(ctx, ns, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	byArtifactName := func(a, b kruntimes.ArtifactRef) int { return strings.Compare(a.Name, b.Name) }
	fromStatus := slices.SortedFunc(slices.Values(r.Artifacts), byArtifactName)
	if !slices.Equal(slices.SortedFunc(slices.Values(listed), byArtifactName), fromStatus) {
		t.Errorf("listed %+v, status %+v", listed, r.Artifacts)
	}

	// Read whole, and by ranges.
	for _, tc := range []struct {
		r    *kruntimes.Range
		want string
	}{
		{nil, "hello artifacts"}, {&kruntimes.Range{Offset: 6}, "artifacts"}, {&kruntimes.Range{Offset: -9}, "artifacts"},
		{&kruntimes.Range{Length: 5}, "hello"},
	} {
		got, err := c.Artifacts.Read(ctx, "", r.Name, "report.txt", tc.r)
		if err != nil || string(got) != tc.want {
			t.Errorf("%+v: %q %v", tc.r, got, err)
		}
	}
	part, err := c.Artifacts.Read(ctx, "", r.Name, "out/deep/blob.bin", &kruntimes.Range{Offset: 1000, Length: 1000})
	if err != nil || len(part) != 1000 {
		t.Fatal(len(part), err)
	}
	var rns *kruntimes.RangeNotSatisfiableError
	if _, err := c.Artifacts.Read(ctx, "", r.Name, "report.txt", &kruntimes.Range{Offset: 15}); !errors.As(err, &rns) || rns.Status != 416 {
		t.Errorf("%T %v", err, err)
	}

	// Download the other, and compare.
	dir := t.TempDir()
	dest := filepath.Join(dir, "blob.bin")
	if err := c.Artifacts.Download(ctx, "", r.Name, "out/deep/blob.bin", dest); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dest)
	if len(got) != 3_000_000 || sha256Hex(got) != byName["out/deep/blob.bin"].SHA256 || string(got[1000:2000]) != string(part) {
		t.Errorf("%d bytes, sha %s", len(got), sha256Hex(got))
	}
	// Streamed, and checked as it is read.
	ar, err := c.Artifacts.Open(ctx, "", r.Name, "out/deep/blob.bin", nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, ar)
	ar.Close()
	if err != nil || n != 3_000_000 || ar.Size != 3_000_000 || ar.SHA256 != byName["out/deep/blob.bin"].SHA256 {
		t.Errorf("%d %v %+v", n, err, ar)
	}

	// A name the Run does not have.
	var nf *kruntimes.NotFoundError
	if _, err := c.Artifacts.Read(ctx, "", r.Name, "nope.txt", nil); !errors.As(err, &nf) || nf.Source != "gateway" ||
		!strings.Contains(nf.Message, "nope.txt") {
		t.Errorf("%T %v", err, err)
	}
	if err := c.Artifacts.Download(ctx, "", r.Name, "nope.txt", filepath.Join(dir, "nope.txt")); !errors.As(err, &nf) {
		t.Errorf("%T %v", err, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%v", entries)
	}
}
