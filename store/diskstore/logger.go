package diskstore

import (
	"context"
	"fmt"
	"log/slog"
)

// pebbleLogger routes Pebble's messages to the store's logger: Pebble's
// informational chatter at debug level, its errors at error level.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf reports an error Pebble cannot continue from (a corrupted log, a
// commit pipeline in an unknown state). Pebble expects it not to return;
// panicking, rather than exiting as Pebble's own logger does, lets the
// embedding program's crash handling see it.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error(msg, "component", "pebble", "fatal", true)
	panic("diskstore: " + msg)
}
