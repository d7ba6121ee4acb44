package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/console"
)

// consoleAddrDefault is where `outbox-relay console` listens: loopback,
// beside the relay's own port.
const consoleAddrDefault = "127.0.0.1:8462"

func cmdConsole(ctx context.Context, inv *Invocation, args []string) error {
	fs := newFlagSet("console [--addr host:port]",
		"Serve the web console (docs/console.md) for the outboxes the configuration names, until SIGTERM or SIGINT:\n"+
			"every outbox at a glance, dead letters by cause, a key's history, who holds the horizon, the relays.\n"+
			"Read-only unless RELAY_CONSOLE_SECRET (or _FILE) is set; then an operator who signs in with it\n"+
			"may retry and purge dead letters and cancel a key's pending rows. Works while no relay runs.", inv.Stderr)
	addr := fs.String("addr", consoleAddrDefault, "listen on `host:port` (loopback by default: open it through an SSH tunnel, kubectl port-forward or an authenticating proxy)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(inv.Environ)
	if err != nil {
		return err
	}
	if err := c.requireDatabase(); err != nil {
		return err
	}
	ts, err := c.tenants(inv.Environ)
	if err != nil {
		return err
	}
	log := newLogger(settingsOf(&c, inv.Version), inv.Stderr)
	lister := newConsoleOutboxes(ts)
	defer lister.close()
	h, err := newConsole(&c, lister, "outbox-relay console", log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("cannot listen on %s (--addr): the address is already in use; pick another with --addr", *addr)
	}
	if err != nil {
		return usageError{fmt.Errorf("--addr %q: %w", *addr, err)}
	}
	srv := &http.Server{Handler: consoleRoot(h), ReadHeaderTimeout: endpointReadHeaderTimeoutDefault, ReadTimeout: endpointReadTimeoutDefault,
		WriteTimeout: endpointWriteTimeoutDefault, IdleTimeout: endpointIdleTimeoutDefault, MaxHeaderBytes: endpointMaxHeaderBytesDefault,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	log.Info("serving the console", "url", "http://"+ln.Addr().String()+console.PrefixDefault+"/", "actions", h.ActionsEnabled())
	warnExposedConsole(log, ln.Addr(), "--addr")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return nil
}

// newConsole returns the console's handler for c's outboxes, logging its
// audit lines and errors to log.
func newConsole(c *config, lister *consoleOutboxes, served string, log *slog.Logger) (*console.Handler, error) {
	h, err := console.New(console.Config{Outboxes: lister.list, Secret: c.ConsoleSecret, DefaultSink: defaultSinkName(c), Served: served, Log: log})
	if err != nil {
		return nil, &configError{Var: "RELAY_CONSOLE_SECRET", Reason: err.Error(),
			Allowed: fmt.Sprintf("at least %d bytes (a random string: openssl rand -base64 24)", console.MinSecretLength)}
	}
	return h, nil
}

// consoleRoot serves the console and sends / to it.
func consoleRoot(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(console.PrefixDefault+"/", h)
	mux.Handle("GET /{$}", http.RedirectHandler(console.PrefixDefault+"/", http.StatusFound))
	return mux
}

// warnExposedConsole says, at warn, that the console is served beyond
// loopback: whoever reaches the port reads the outboxes, payload previews
// included (docs/console.md: behind an authenticating proxy).
func warnExposedConsole(log *slog.Logger, addr net.Addr, setting string) {
	if tcp, ok := addr.(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warn("the console listens beyond loopback: whoever reaches the port reads every outbox, payload previews included; serve it on loopback (port-forward, SSH) or behind an authenticating proxy",
			"addr", addr.String(), "variable", setting)
	}
}

// consoleListEvery is how long the console reuses its list of outboxes:
// a schema pattern's matches are found again after it.
const consoleListEvery = 5 * time.Second

// consoleOutboxes lists the outboxes of the configuration for the console,
// with one pool per database, shared by the pages. Unlike a command's
// adminPools it forgets a database it could not reach once the list is
// stale, so that the console sees it come back.
type consoleOutboxes struct {
	ts []tenant
	mu sync.Mutex
	// pools outlive each listing; listed and at are the last listing.
	pools  *adminPools
	listed []console.Outbox
	at     time.Time
}

func newConsoleOutboxes(ts []tenant) *consoleOutboxes {
	return &consoleOutboxes{ts: ts, pools: newAdminPools()}
}

// list returns the outboxes, listed again when the last list is older than
// consoleListEvery.
func (l *consoleOutboxes) list(ctx context.Context) []console.Outbox {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.listed != nil && time.Since(l.at) < consoleListEvery {
		return l.listed
	}
	clear(l.pools.errs)
	var out []console.Outbox
	for _, f := range listOutboxes(ctx, l.ts, l.pools) {
		o := console.Outbox{Tenant: f.Tenant, Database: databaseLabel(f.DatabaseURL), Schema: f.Schema, Err: f.Err}
		if f.Schema == "" {
			o.Schema = "(" + f.describe() + ")"
			if o.Err == nil {
				o.Err = errors.New(f.describe())
			}
			out = append(out, o)
			continue
		}
		if o.Err == nil {
			o.Admin, o.Err = l.pools.admin(ctx, f.outboxRef)
		}
		out = append(out, o)
	}
	l.listed, l.at = out, time.Now()
	return out
}

func (l *consoleOutboxes) close() { l.pools.close() }

// databaseLabel names a database for people: host, port and database
// name, never a user or password.
func databaseLabel(databaseURL string) string {
	if u, err := url.Parse(databaseURL); err == nil && u.Host != "" {
		return u.Host + u.Path
	}
	var host, port, db string
	for _, kv := range strings.Fields(databaseURL) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "host":
			host = v
		case "port":
			port = v
		case "dbname":
			db = v
		}
	}
	if port != "" {
		host += ":" + port
	}
	return host + "/" + db
}
