// Package oneline shortens what the injector's messages quote: an error
// joined onto one line and cut, a value cut at a character boundary.
// Messages end up in admission responses, warnings and the offline tools'
// output, and must never echo a document back.
package oneline

import (
	"strings"
	"unicode/utf8"
)

// Error joins a multi-line error onto one line and cuts it to 1 KiB.
func Error(err error) string {
	return Clip(strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "), 1024)
}

// Clip cuts s to at most limit bytes, ending in "…" when it cut (just "…"
// when limit leaves no room for more), never in the middle of a UTF-8
// sequence.
func Clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := max(limit-len("…"), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
