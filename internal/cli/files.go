package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Limits on the files the configuration names. A file is read whole at
// start, so a path to /dev/zero, a FIFO or a huge file would hang the relay
// or grow it until the OOM killer ends it; such a path is refused at once,
// naming its variable.
const (
	// secretFileLimit bounds a secret's _FILE twin (DATABASE_URL_FILE, …),
	// and the NATS credentials and NKey seed files: a URL, a password, a
	// JWT with its seed.
	secretFileLimit = 64 << 10
	// pemFileLimit bounds a TLS file (*_TLS_CA_FILE, *_TLS_CERT_FILE,
	// *_TLS_KEY_FILE): a CA bundle of a few hundred certificates fits.
	pemFileLimit = 1 << 20
	// tenantsFileLimit bounds RELAY_TENANTS_FILE: thousands of tenants
	// fit. The start-up check of the path and the reader of the file both
	// use it.
	tenantsFileLimit = 1 << 20
)

// fileLimit returns the size limit of the file variable name.
func fileLimit(name string) int64 {
	switch {
	case name == "RELAY_TENANTS_FILE":
		return tenantsFileLimit
	case strings.Contains(name, "_TLS_"):
		return pemFileLimit
	}
	return secretFileLimit
}

// formatLimit prints a file limit in KiB or MiB.
func formatLimit(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// errFileNotRegular and errFileTooLarge are why checkFile refuses a file.
var (
	errFileNotRegular = errors.New("not a regular file")
	errFileTooLarge   = errors.New("larger than allowed")
)

// checkFile refuses a path that does not lead, through any symbolic links
// (Kubernetes mounts secrets as links), to a regular file of at most limit
// bytes. A path that cannot be looked up is returned as stat's error.
func checkFile(path string, limit int64) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: it is %s", errFileNotRegular, fileKind(fi.Mode()))
	}
	if fi.Size() > limit {
		return fmt.Errorf("%w: %d bytes, more than %s", errFileTooLarge, fi.Size(), formatLimit(limit))
	}
	return nil
}

// fileKind names what a path that is not a regular file leads to.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a plain file"
}

// readFileLimited reads a regular file of at most limit bytes, checked
// before it is opened (opening a FIFO would block) and again while it is
// read (it may have grown since).
func readFileLimited(path string, limit int64) ([]byte, error) {
	if err := checkFile(path, limit); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: more than %s", errFileTooLarge, formatLimit(limit))
	}
	return b, nil
}

// checkFileVars refuses every path variable (its name ends in _FILE) whose
// value leads to something other than a regular file within its limit,
// before the sinks' checks read them. A path that does not exist is left
// to those checks, which say so with the sink's context.
func (c *config) checkFileVars() error {
	for _, f := range configFields() {
		if !strings.HasSuffix(f.name, fileSuffix) {
			continue
		}
		path := f.value(c).String()
		if path == "" {
			continue
		}
		limit := fileLimit(f.name)
		if err := checkFile(path, limit); errors.Is(err, errFileNotRegular) || errors.Is(err, errFileTooLarge) {
			return &configError{Var: f.name, Value: path, Reason: err.Error(),
				Allowed: "the path of a regular file (or a link to one) of at most " + formatLimit(limit)}
		}
	}
	return nil
}
