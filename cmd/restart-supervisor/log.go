package main

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// lineLogger writes the supervisor's log lines in the formats of log/slog's
// TextHandler and JSONHandler with default options, byte for byte
// (log_test.go compares them), for the kinds of values the supervisor logs.
// log/slog itself is not linked: with it came about 130 kB of the
// stripped binary, and the binary's pages are most of its resident set.
// It satisfies supervise.Logger.
type lineLogger struct {
	json  bool
	w     io.Writer
	mu    *sync.Mutex
	attrs []byte // preformatted attributes of with, each with its separator
	now   func() time.Time
}

func newLineLogger(w io.Writer, json bool) *lineLogger {
	return &lineLogger{json: json, w: w, mu: new(sync.Mutex), now: time.Now}
}

// with returns a logger that adds the key-value pairs to every line.
func (l *lineLogger) with(args ...any) *lineLogger {
	c := *l
	c.attrs = l.appendAttrs(append([]byte(nil), l.attrs...), args)
	return &c
}

// level is a log level with slog's names; lines below info are dropped, as
// by slog's handlers without options.
type level int

const (
	levelDebug level = -4
	levelInfo  level = 0
	levelWarn  level = 4
	levelError level = 8
)

func (v level) String() string {
	switch v {
	case levelDebug:
		return "DEBUG"
	case levelWarn:
		return "WARN"
	case levelError:
		return "ERROR"
	}
	return "INFO"
}

func (l *lineLogger) Debug(msg string, args ...any) { l.log(levelDebug, msg, args) }
func (l *lineLogger) Info(msg string, args ...any)  { l.log(levelInfo, msg, args) }
func (l *lineLogger) Warn(msg string, args ...any)  { l.log(levelWarn, msg, args) }
func (l *lineLogger) Error(msg string, args ...any) { l.log(levelError, msg, args) }

func (l *lineLogger) log(lv level, msg string, args []any) {
	if lv < levelInfo {
		return
	}
	buf := l.format(l.now(), lv, msg, args)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(buf)
}

// format is one line: time, level, message, the attributes of with, then
// args.
func (l *lineLogger) format(t time.Time, lv level, msg string, args []any) []byte {
	buf := make([]byte, 0, 256)
	if l.json {
		buf = append(buf, '{')
	}
	t = t.Round(0)
	buf = l.appendKey(buf, "time", true)
	if l.json {
		buf = append(buf, '"')
		buf = t.AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
	} else {
		buf = appendRFC3339Millis(buf, t)
	}
	buf = l.appendKey(buf, "level", false)
	buf = l.appendString(buf, lv.String())
	buf = l.appendKey(buf, "msg", false)
	buf = l.appendString(buf, msg)
	buf = append(buf, l.attrs...)
	buf = l.appendAttrs(buf, args)
	if l.json {
		buf = append(buf, '}')
	}
	return append(buf, '\n')
}

// appendAttrs takes args as slog's Logger methods do: a string key and
// the value after it; a key without a value, or a value where a key
// should be, goes under !BADKEY.
func (l *lineLogger) appendAttrs(buf []byte, args []any) []byte {
	for len(args) > 0 {
		key, ok := args[0].(string)
		var v any
		switch {
		case !ok:
			key, v, args = "!BADKEY", args[0], args[1:]
		case len(args) == 1:
			key, v, args = "!BADKEY", key, nil
		default:
			v, args = args[1], args[2:]
		}
		buf = l.appendKey(buf, key, false)
		buf = l.appendValue(buf, v)
	}
	return buf
}

func (l *lineLogger) appendKey(buf []byte, key string, first bool) []byte {
	switch {
	case l.json && !first:
		buf = append(buf, ',')
	case !l.json && !first:
		buf = append(buf, ' ')
	}
	buf = l.appendString(buf, key)
	if l.json {
		return append(buf, ':')
	}
	return append(buf, '=')
}

func (l *lineLogger) appendString(buf []byte, s string) []byte {
	if l.json {
		buf = append(buf, '"')
		buf = appendEscapedJSONString(buf, s)
		return append(buf, '"')
	}
	if needsQuoting(s) {
		return strconv.AppendQuote(buf, s)
	}
	return append(buf, s...)
}

// appendValue formats v as slog's handlers format the Value slog.AnyValue
// makes of it.
func (l *lineLogger) appendValue(buf []byte, v any) []byte {
	switch x := v.(type) {
	case string:
		return l.appendString(buf, x)
	case int:
		return strconv.AppendInt(buf, int64(x), 10)
	case int8:
		return strconv.AppendInt(buf, int64(x), 10)
	case int16:
		return strconv.AppendInt(buf, int64(x), 10)
	case int32:
		return strconv.AppendInt(buf, int64(x), 10)
	case int64:
		return strconv.AppendInt(buf, x, 10)
	case uint:
		return strconv.AppendUint(buf, uint64(x), 10)
	case uint8:
		return strconv.AppendUint(buf, uint64(x), 10)
	case uint16:
		return strconv.AppendUint(buf, uint64(x), 10)
	case uint32:
		return strconv.AppendUint(buf, uint64(x), 10)
	case uint64:
		return strconv.AppendUint(buf, x, 10)
	case uintptr:
		return strconv.AppendUint(buf, uint64(x), 10)
	case bool:
		return strconv.AppendBool(buf, x)
	case time.Duration:
		if l.json {
			return strconv.AppendInt(buf, int64(x), 10)
		}
		return append(buf, x.String()...)
	case time.Time:
		x = x.Round(0)
		if l.json {
			buf = append(buf, '"')
			buf = x.AppendFormat(buf, time.RFC3339Nano)
			return append(buf, '"')
		}
		return appendRFC3339Millis(buf, x)
	case float32, float64:
		// Rare: the supervisor logs no floats. Both handlers' own
		// float formats are matched by the general case below for
		// JSON; text uses strconv's shortest form, as slog does.
		f := toFloat(x)
		if !l.json {
			return strconv.AppendFloat(buf, f, 'g', -1, 64)
		}
		return l.appendJSONMarshal(buf, f)
	}
	if l.json {
		_, jm := v.(json.Marshaler)
		if err, ok := v.(error); ok && !jm {
			return l.appendString(buf, err.Error())
		}
		return l.appendJSONMarshal(buf, v)
	}
	if tm, ok := v.(encoding.TextMarshaler); ok {
		data, err := tm.MarshalText()
		if err != nil {
			return l.appendString(buf, "!ERROR:"+err.Error())
		}
		return l.appendString(buf, string(data))
	}
	if bs, ok := v.([]byte); ok {
		return strconv.AppendQuote(buf, string(bs))
	}
	return l.appendString(buf, fmt.Sprintf("%+v", v))
}

func toFloat(v any) float64 {
	if f, ok := v.(float32); ok {
		return float64(f)
	}
	return v.(float64)
}

// appendJSONMarshal is slog's JSON form of any other value: encoding/json
// without HTML escaping, or the error it gave.
func (l *lineLogger) appendJSONMarshal(buf []byte, v any) []byte {
	var bb bytes.Buffer
	enc := json.NewEncoder(&bb)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return l.appendString(buf, "!ERROR:"+err.Error())
	}
	bs := bb.Bytes()
	return append(buf, bs[:len(bs)-1]...)
}

// appendRFC3339Millis is RFC 3339 with exactly three digits of the second's
// fraction, truncated, as slog's text handler writes times.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b[:n+prefixLen], b[n+prefixLen+1:]...)
}

// jsonSafe is true for the ASCII characters a JSON string holds unescaped.
func jsonSafe(b byte) bool { return b >= ' ' && b != '"' && b != '\\' }

// needsQuoting is slog's text handler's rule: empty, or holding a space,
// '=', a character JSON would escape (but a backslash), an invalid byte or
// a non-printing rune.
func needsQuoting(s string) bool {
	if len(s) == 0 {
		return true
	}
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b != '\\' && (b == ' ' || b == '=' || !jsonSafe(b)) {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}

const hexDigits = "0123456789abcdef"

// appendEscapedJSONString is slog's JSON string escaping: quotes,
// backslashes and control characters escaped, invalid bytes as U+FFFD,
// U+2028 and U+2029 escaped, HTML characters left as they are.
func appendEscapedJSONString(buf []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe(b) {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\')
			switch b {
			case '\\', '"':
				buf = append(buf, b)
			case '\n':
				buf = append(buf, 'n')
			case '\r':
				buf = append(buf, 'r')
			case '\t':
				buf = append(buf, 't')
			default:
				buf = append(buf, 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\u202`...)
			buf = append(buf, hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(buf, s[start:]...)
}
