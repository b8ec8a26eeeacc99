package yamlbound

import (
	"fmt"
	"strings"
	"testing"

	textyaml "go.yaml.in/yaml/v3"
)

func parse(t *testing.T, s string) *textyaml.Node {
	t.Helper()
	var n textyaml.Node
	if err := textyaml.Unmarshal([]byte(s), &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// laughs is a billion laughs of depth levels, ten aliases per level.
func laughs(levels int) string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x]\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"plain", "a: 1\nb: [1, 2, {c: d}]\n", ""},
		{"anchors a few times", "x: &x {a: 1, b: 2}\ny: *x\nz: {<<: *x, c: 3}\n", ""},
		{"repeated key", "a: 1\nb: 2\na: 3\n", `line 3: mapping key "a" already defined at line 1`},
		{"repeated key deep", "a: {b: [{c: 1, c: 2}]}\n", `line 1: mapping key "c" already defined at line 1`},
		{"laughs within", laughs(4), ""},
		{"laughs", laughs(7), "aliases expand the document by more than 1048576 nodes"},
		{"many keys", "{" + strings.Repeat("k,", 0) + keys(12000) + "}\n", "pairs of keys to compare"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(parse(t, tc.doc), Default)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Check: %v, want %q", err, tc.want)
			}
		})
	}
}

func keys(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("k%d: 1", i)
	}
	return strings.Join(parts, ", ")
}

// The members an undo record gives back share one budget.
func TestTake(t *testing.T) {
	b := Budget{AliasNodes: 70, KeyComparisons: 1000}
	doc := laughs(1) // 10 aliases of a sequence of one: 30 nodes
	if err := b.Take(parse(t, doc)); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(parse(t, doc)); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(parse(t, doc)); err == nil || !strings.Contains(err.Error(), "more than 10 nodes") {
		t.Errorf("third take of 30 alias nodes out of 70: %v", err)
	}
}
