package main

import (
	"encoding/json"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
)

// The Dockerfile is configuration too: this test keeps it in step with the
// binary, so that a renamed subcommand or port breaks the build instead of
// the image.

// dockerfile returns the Dockerfile's instructions, continuation lines
// joined, comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	return out
}

// instruction returns the arguments of the last instruction named name.
func instruction(lines []string, name string) string {
	var last string
	for _, l := range lines {
		if k, v, _ := strings.Cut(l, " "); strings.EqualFold(k, name) {
			last = strings.TrimSpace(v)
		}
	}
	return last
}

func execForm(t *testing.T, name, args string) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		t.Fatalf("%s %s: want the exec form (a JSON array): the image has no shell", name, args)
	}
	return argv
}

func TestDockerfile_InStepWithTheBinary(t *testing.T) {
	lines := dockerfile(t)

	build := instruction(lines, "RUN")
	if !strings.Contains(build, ".ci/build /out/outbox-relay") || !strings.Contains(build, "VERSION=") {
		t.Errorf("the last RUN is %q; want it to build with .ci/build (the flags CI uses) and pass VERSION", build)
	}
	if got := instruction(lines, "USER"); got != "65532:65532" {
		t.Errorf("USER %s, want 65532:65532 (distroless nonroot, numeric)", got)
	}

	if ep := execForm(t, "ENTRYPOINT", instruction(lines, "ENTRYPOINT")); !slices.Equal(ep, []string{"/outbox-relay"}) {
		t.Errorf("ENTRYPOINT %q", ep)
	}
	cmd := execForm(t, "CMD", instruction(lines, "CMD"))
	if len(cmd) != 1 {
		t.Fatalf("CMD %q, want one subcommand", cmd)
	}
	if _, err := command(cmd[0]); err != nil {
		t.Errorf("CMD: %v", err)
	}

	hc := instruction(lines, "HEALTHCHECK")
	_, probe, ok := strings.Cut(hc, " CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %q has no CMD", hc)
	}
	argv := execForm(t, "HEALTHCHECK CMD", strings.TrimSpace(probe))
	if len(argv) < 2 || argv[0] != "/outbox-relay" {
		t.Fatalf("HEALTHCHECK CMD %q, want /outbox-relay healthcheck", argv)
	}
	if _, err := command(argv[1]); err != nil {
		t.Errorf("HEALTHCHECK: %v", err)
	}

	var def string
	for _, v := range envReference() {
		if v.Name == "RELAY_HTTP_ADDR" {
			def = v.Default
		}
	}
	_, port, err := net.SplitHostPort(def)
	if err != nil {
		t.Fatal(err)
	}
	if got := instruction(lines, "EXPOSE"); got != port {
		t.Errorf("EXPOSE %s, want %s (RELAY_HTTP_ADDR's default %s)", got, port, def)
	}
}
