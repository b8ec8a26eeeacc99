package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

type textMarshaler struct{ s string }

func (t textMarshaler) MarshalText() ([]byte, error) { return []byte("tm:" + t.s), nil }

type stringer int

func (s stringer) String() string { return "stringer-" + string(rune('a'+int(s))) }

// TestLineLoggerMatchesSlog holds the supervisor's log writer to log/slog's
// TextHandler and JSONHandler: the same record gives the same bytes.
func TestLineLoggerMatchesSlog(t *testing.T) {
	rule := 3
	times := []time.Time{
		time.Date(2026, 12, 1, 1, 2, 3, 0, time.UTC),
		time.Date(2026, 12, 1, 1, 2, 3, 999999999, time.UTC),
		time.Date(2026, 7, 4, 23, 59, 59, 120000000, time.FixedZone("X", 5*3600+1800)),
		time.Now(),
	}
	msgs := []string{
		"workload started", "", "a=b", `quote " and \ backslash`, "tab\tnewline\n", "ünïcødé", "\u2028sep\u2029",
		"bad \xff byte", "<html> & stuff", "non\u00a0breaking", "ctl \x01\x7f",
	}
	argSets := [][]any{
		nil,
		{"pid", 123, "command", "/bin/true", "restarts", 0},
		{"exitCode", int32(-1), "gen", uint64(1 << 40), "u8", uint8(7), "i64", int64(math.MinInt64), "up", uintptr(9)},
		{"ranFor", 1500 * time.Millisecond, "delay", time.Duration(0), "gracePeriod", 30 * time.Second},
		{"at", times[2], "ok", true, "no", false},
		{"err", errors.New("open /x: no such file or directory"), "nilerr", error(nil)},
		{"action", rules.ActionRestart, "policy", rules.Never, "phase", stringer(2)},
		{"f", 1.5, "f32", float32(0.25), "big", 1e21},
		{"tm", textMarshaler{"v"}, "bytes", []byte("raw\n"), "ptr", &rule, "slice", []string{"a", "b c"}},
		{"empty", "", "spaced key", "v", "=", "eq", "k", "a=b"},
		{"dangling"},
		{42, "x"},
		{"m", map[string]int{"b": 2, "a": 1}},
	}
	levels := []struct {
		lv  level
		slv slog.Level
	}{{levelInfo, slog.LevelInfo}, {levelWarn, slog.LevelWarn}, {levelError, slog.LevelError}}
	for _, json := range []bool{false, true} {
		for _, name := range []string{"", "app"} {
			var want bytes.Buffer
			var h slog.Handler = slog.NewTextHandler(&want, nil)
			if json {
				h = slog.NewJSONHandler(&want, nil)
			}
			h = h.WithAttrs([]slog.Attr{slog.String("logger", "restart-supervisor")})
			l, err := newLogger(map[bool]string{false: "text", true: "json"}[json], os.Stderr, name)
			if err != nil {
				t.Fatal(err)
			}
			if name != "" {
				h = h.WithAttrs([]slog.Attr{slog.String("container", name)})
			}
			for _, tm := range times {
				for _, msg := range msgs {
					for _, args := range argSets {
						for _, lv := range levels {
							want.Reset()
							r := slog.NewRecord(tm, lv.slv, msg, 0)
							r.Add(args...)
							if err := h.Handle(context.Background(), r); err != nil {
								t.Fatal(err)
							}
							got := l.format(tm, lv.lv, msg, args)
							if !bytes.Equal(got, want.Bytes()) {
								t.Fatalf("json=%v name=%q msg=%q args=%v:\n got %s\nwant %s", json, name, msg, args, got, want.Bytes())
							}
						}
					}
				}
			}
		}
	}
}

func TestLineLoggerDropsDebugAndWritesWholeLines(t *testing.T) {
	var buf bytes.Buffer
	l, err := newLogger("text", &buf, "c")
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("hidden", "k", 1)
	if buf.Len() != 0 {
		t.Fatalf("a debug line was written: %q", buf.String())
	}
	l.Info("shown", "k", 1)
	l.Warn("warned")
	l.Error("failed", "err", errors.New("boom"))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "level=INFO msg=shown logger=restart-supervisor container=c k=1") ||
		!strings.Contains(lines[1], "level=WARN msg=warned") || !strings.Contains(lines[2], "level=ERROR msg=failed logger=restart-supervisor container=c err=boom") {
		t.Fatalf("lines:\n%s", buf.String())
	}
}
