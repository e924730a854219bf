package state

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// etcdLogger is the logger the embedded etcd and the etcd client log
// through: their warnings and errors go to log (the daemon's), tagged
// component=etcd, their chatter below warnings nowhere. A fatal error,
// after which etcd's code ends the process, is also written to stderr,
// so the process never exits without a word (a discarded log, as in
// tests, would otherwise hide why).
func etcdLogger(log *slog.Logger) *zap.Logger {
	return zap.New(&slogCore{log: log.With("component", "etcd")}, zap.WithFatalHook(fatalHook{}))
}

// slogCore is a zapcore.Core writing to a slog.Logger.
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(append([]zapcore.Field(nil), c.fields...), fields...) {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	level := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		level = slog.LevelError
	}
	c.log.Log(context.Background(), level, e.Message, attrs...)
	if e.Level >= zapcore.DPanicLevel {
		fmt.Fprintf(os.Stderr, "etcd: %s: %s %v\n", e.Level.CapitalString(), e.Message, enc.Fields)
	}
	return nil
}

func (c *slogCore) Sync() error { return nil }

// fatalHook ends the process as zap's default does, after Write told.
type fatalHook struct{}

func (fatalHook) OnWrite(*zapcore.CheckedEntry, []zapcore.Field) { os.Exit(1) }
