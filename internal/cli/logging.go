package cli

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
)

// newLogger returns the configured logger: tint on a terminal, JSON
// otherwise (LOG_FORMAT=auto), at LOG_LEVEL.
func newLogger(s settings, w io.Writer) *slog.Logger {
	format := s.LogFormat
	if format == "auto" {
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(tint.NewHandler(w, &tint.Options{Level: s.LogLevel, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: s.LogLevel, ReplaceAttr: readableDurations}))
}

// readableDurations writes durations as "1h0m30s" rather than nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := underlying(w).(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
