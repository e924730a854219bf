package state

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

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
	switch {
	case e.Level < zapcore.DPanicLevel && benign(e.Message, enc.Fields):
		level = slog.LevelDebug
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	}
	c.log.Log(context.Background(), level, e.Message, attrs...)
	if e.Level >= zapcore.DPanicLevel {
		fmt.Fprintf(os.Stderr, "etcd: %s: %s %v\n", e.Level.CapitalString(), e.Message, enc.Fields)
	}
	return nil
}

func (c *slogCore) Sync() error { return nil }

// benignNotices are etcd's warnings about how the embedded store is set
// up on purpose (one member serving its clients and gRPC on one loopback
// port, no authentication): they say nothing about its health, and
// every CLI command that opens the store would print them.
var benignNotices = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

// benign: a warning that says nothing about the store's health, at
// debug: a set-up notice, or a listener's end as the store closes (its
// error a closed listener's).
func benign(msg string, fields map[string]any) bool {
	if benignNotices[msg] {
		return true
	}
	err, _ := fields["error"].(string)
	return strings.HasSuffix(err, "use of closed network connection") || err == "http: Server closed"
}

// fatalHook ends the process as zap's default does, after Write told.
type fatalHook struct{}

func (fatalHook) OnWrite(*zapcore.CheckedEntry, []zapcore.Field) { os.Exit(1) }

// QuietEtcdLogger is for an embedded etcd or an etcd client whose log
// nobody reads (a restore's check, the simulator's controllers): it
// drops everything, but a fatal error, after which etcd's code ends the
// process, is written to stderr first, so that the process never exits
// without a word (zap's no-op logger exits silently).
func QuietEtcdLogger() *zap.Logger {
	return zap.NewNop().WithOptions(zap.WithFatalHook(quietFatal{}))
}

// quietFatal says a fatal entry on stderr, then ends the process.
type quietFatal struct{}

func (quietFatal) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	fmt.Fprintf(os.Stderr, "etcd: FATAL: %s %v\n", ce.Message, enc.Fields)
	os.Exit(1)
}
