package cli

import (
	"context"
	"io"
	"path/filepath"
)

// repoRoot is the module's root, from this package's directory.
const repoRoot = "../.."

// repoFile is the path of a file at the module's root.
func repoFile(name string) string { return filepath.Join(repoRoot, name) }

// run runs the binary's command line in process, as main does, and returns
// the exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	return Main(ctx, Invocation{Version: "test", Args: args, Environ: environ, Stdout: stdout, Stderr: stderr})
}
