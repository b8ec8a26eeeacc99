// Package yamlstyle owns reading the layout a YAML file was written in, so
// that what the project writes back into it (injected manifests, Compose
// files) keeps the author's style.
package yamlstyle

import "strings"

// CompactSequences reports whether raw writes block sequences at the
// indentation of their key ("key:\n- a") rather than indented under it;
// the first sequence found decides, and fallback answers for a file
// without one. Comment lines are not keys.
func CompactSequences(raw []byte, fallback bool) bool {
	lines := strings.Split(string(raw), "\n")
	for i := 0; i+1 < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t\r")
		if !strings.HasSuffix(l, ":") || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		next := lines[i+1]
		t := strings.TrimLeft(next, " ")
		if !strings.HasPrefix(t, "- ") && t != "-" {
			continue
		}
		indentKey := len(l) - len(strings.TrimLeft(l, " "))
		if strings.HasPrefix(strings.TrimLeft(l, " "), "- ") {
			indentKey += 2
		}
		return len(next)-len(t) == indentKey
	}
	return fallback
}
