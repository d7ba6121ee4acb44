package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger passes the client's log to slog. The client's errors are
// warnings here; everything else it says (request failures while a broker
// restarts, metadata updates) is debug: the sink logs what matters to an
// operator itself, once per change.
type kgoLogger struct{ log *slog.Logger }

var _ kgo.Logger = kgoLogger{}

// Level implements kgo.Logger: as much as the slog handler would keep.
func (l kgoLogger) Level() kgo.LogLevel {
	switch {
	case l.log.Enabled(context.Background(), slog.LevelDebug):
		return kgo.LogLevelDebug
	case l.log.Enabled(context.Background(), slog.LevelWarn):
		return kgo.LogLevelError
	}
	return kgo.LogLevelNone
}

// Log implements kgo.Logger.
func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelDebug
	if level == kgo.LogLevelError {
		lvl = slog.LevelWarn
	}
	l.log.Log(context.Background(), lvl, "kafka client: "+msg, keyvals...)
}
