package kruntimes

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAProgramElsewhereUsesTheSDKAsDocsSdkGoSays runs docs/sdk-go.md's
// install steps in a fresh module: go mod edit -require -replace, go mod
// tidy, then a build. It needs the module proxy (skipped with -short).
func TestAProgramElsewhereUsesTheSDKAsDocsSdkGoSays(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Go module proxy")
	}
	sdk, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	main := "package main\n\nimport (\n\t\"fmt\"\n\n\tkruntimes \"kruntimes.io/sdk\"\n)\n\nfunc main() { fmt.Println(kruntimes.MaxFileBytes) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"mod", "init", "example.com/app"},
		{"mod", "edit", "-require=kruntimes.io/sdk@v0.0.0", "-replace=kruntimes.io/sdk=" + sdk},
		{"mod", "tidy"},
		{"build", "-o", filepath.Join(dir, "app"), "."},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	out, err := exec.Command(filepath.Join(dir, "app")).Output()
	if err != nil || string(out) != "33554432\n" {
		t.Fatalf("%q %v", out, err)
	}
}
