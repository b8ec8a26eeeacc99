package supervise

// Logger receives the supervisor's log lines: a message and key-value
// pairs, as log/slog's Logger takes them (a *slog.Logger is a Logger).
// restart-supervisor passes its own writer of slog's text and JSON
// formats, so that the PID-1 binary does not link log/slog.
type Logger interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// Discard is a Logger that drops every line.
var Discard Logger = discard{}

type discard struct{}

func (discard) Debug(string, ...any) {}
func (discard) Info(string, ...any)  {}
func (discard) Warn(string, ...any)  {}
func (discard) Error(string, ...any) {}
