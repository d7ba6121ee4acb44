package gctune

import (
	"os"
	"path/filepath"
	"testing"
)

// TestContainerMemoryLimit: the limit is read from the first file that
// holds a number of bytes; "max" (cgroup v2) and cgroup v1's number near
// 2^63 mean none, and a missing file is passed over.
func TestContainerMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "missing")
	v2None := file("v2-none", "max\n")
	v1None := file("v1-none", "9223372036854771712\n")
	limited := file("limited", "268435456\n")
	for _, c := range []struct {
		name  string
		files []string
		want  int64
		ok    bool
	}{
		{"cgroup v2 without a limit", []string{v2None}, 0, false},
		{"cgroup v1 without a limit", []string{v1None}, 0, false},
		{"no cgroup files", []string{missing}, 0, false},
		{"a limit", []string{missing, limited}, 268435456, true},
		{"the first file with a limit", []string{v2None, limited}, 268435456, true},
	} {
		got, ok := containerMemoryLimit(c.files)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
