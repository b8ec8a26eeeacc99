package oneline

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 64, "short"},
		{"abcdefgh", 8, "abcdefgh"},
		{"abcdefghi", 8, "abcde…"},
		// "é" is two bytes: the cut moves back to the start of the rune.
		{"aaaaéé", 7, "aaaa…"},
		// A limit below the ellipsis's 3 bytes cuts everything before it.
		{"abcdef", 2, "…"},
	} {
		if got := Clip(tc.in, tc.max); got != tc.want || !utf8.ValidString(got) || len(got) > max(tc.max, len("…")) {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func TestError(t *testing.T) {
	if got := Error(errors.New("first\n  second\tthird")); got != "first; second third" {
		t.Errorf("Error = %q", got)
	}
	long := Error(errors.New(strings.Repeat("x", 5000)))
	if len(long) > 1024 || !strings.HasSuffix(long, "…") {
		t.Errorf("a 5000-byte error gives %d bytes", len(long))
	}
}
