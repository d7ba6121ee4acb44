package cli

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite generated README sections")

// envTable renders the configuration reference as the README shows it.
func envTable() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n| --- | --- | --- |\n")
	for _, v := range envReference() {
		def := "unset"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		meaning := v.Doc + " Allowed: " + v.Allowed + "."
		b.WriteString("| `" + v.Name + "` | " + def + " | " + strings.ReplaceAll(meaning, "|", `\|`) + " |\n")
	}
	return b.String()
}

func TestREADME_ConfigReference(t *testing.T) {
	readme, err := os.ReadFile(repoFile("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- config:begin", "<!-- config:end -->"
	s := string(readme)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %s … %s section", begin, end)
	}
	section := s[i:j]
	section = section[strings.Index(section, "-->")+len("-->\n"):]
	want := envTable()
	if *update {
		start := i + strings.Index(s[i:], "-->") + len("-->\n")
		if err := os.WriteFile(repoFile("README.md"), []byte(s[:start]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if section != want {
		t.Errorf("README's configuration reference is out of step with the configuration; run go test ./internal/cli -run TestREADME_ConfigReference -update to regenerate it from the struct tags")
	}
}

func TestREADME_DocumentsEveryCommandAndFlag(t *testing.T) {
	readme, err := os.ReadFile(repoFile("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(readme)
	var invocations [][]string
	for _, c := range commands {
		switch c.name {
		case "dead":
			invocations = append(invocations, []string{"dead", "list"}, []string{"dead", "retry"}, []string{"dead", "purge"})
		case "help":
		default:
			invocations = append(invocations, []string{c.name})
		}
	}
	for _, inv := range invocations {
		name := "outbox-relay " + strings.Join(inv, " ")
		if !strings.Contains(doc, "`"+name) {
			t.Errorf("README does not show %s", name)
		}
		var stdout, stderr strings.Builder
		if code := run(context.Background(), append(inv, "-h"), nil, &stdout, &stderr); code != exitOK {
			t.Errorf("%s -h: exit %d", name, code)
		}
		for _, line := range strings.Split(stderr.String(), "\n") {
			if !strings.HasPrefix(line, "  -") {
				continue
			}
			flag := "--" + strings.TrimLeft(strings.Fields(line)[0], "-")
			if !strings.Contains(doc, flag) {
				t.Errorf("README does not document %s %s", name, flag)
			}
		}
	}
}

func TestREADME_LeastPrivilegeGrants(t *testing.T) {
	readme, err := os.ReadFile(repoFile("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	grants, err := os.ReadFile(repoFile("migrations/least_privilege.sql"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- least-privilege:begin", "<!-- least-privilege:end -->"
	s := string(readme)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %s … %s section", begin, end)
	}
	start := i + strings.Index(s[i:], "-->") + len("-->\n")
	want := "```sql\n" + string(grants) + "```\n"
	if *update {
		if err := os.WriteFile(repoFile("README.md"), []byte(s[:start]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if s[start:j] != want {
		t.Errorf("README's least-privilege grants differ from migrations/least_privilege.sql; run go test ./internal/cli -run TestREADME_LeastPrivilegeGrants -update to copy the file into the README")
	}
}
