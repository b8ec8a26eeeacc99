package injector

import (
	"math/rand/v2"
	"strings"
	"testing"

	textyaml "go.yaml.in/yaml/v3"
)

// TestQuotedMatchesEmitter writes trees holding long strings, some of
// them single-quotable, in every block context a value can take, both
// through the emitter alone and through encodeDocument's placeholders:
// the bytes must be the same.
func TestQuotedMatchesEmitter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = `abcXYZ019 '"{}[],:#&*!|>%@-?\/` + "`"
	randString := func() string {
		var b strings.Builder
		b.WriteByte("{["[rng.IntN(2)])
		n := rng.IntN(200)
		odd := 1 << 20 // most strings are single-quotable
		if rng.IntN(4) == 0 {
			odd = 40
		}
		for i := 0; i < n; i++ {
			switch rng.IntN(odd) {
			case 0:
				b.WriteString("é") // not ASCII: left to the emitter
			case 1:
				b.WriteByte('\t')
			case 2:
				b.WriteByte('\n')
			default:
				b.WriteByte(alphabet[rng.IntN(len(alphabet))])
			}
		}
		if rng.IntN(10) == 0 {
			b.WriteByte(' ')
		}
		return b.String()
	}
	str := func(s string) *textyaml.Node {
		return &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!str", Value: s}
	}
	quotable := 0
	for i := 0; i < 2000; i++ {
		s1, s2, s3 := randString(), randString(), randString()
		for _, s := range []string{s1, s2, s3} {
			if singleQuotable(s) {
				quotable++
			}
		}
		seq := &textyaml.Node{Kind: textyaml.SequenceNode, Tag: "!!seq", Content: []*textyaml.Node{str(s2), str("short")}}
		flow := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map", Style: textyaml.FlowStyle,
			Content: []*textyaml.Node{str("f"), str(s3)}}
		inner := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map", Content: []*textyaml.Node{
			str("a"), str(s1), str("list"), seq, str("flow"), flow}}
		top := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map", Content: []*textyaml.Node{
			str("metadata"), inner, str("items"), &textyaml.Node{Kind: textyaml.SequenceNode, Tag: "!!seq", Content: []*textyaml.Node{inner}}}}
		doc := &textyaml.Node{Kind: textyaml.DocumentNode, Content: []*textyaml.Node{top}}
		for _, compact := range []bool{false, true} {
			want, err := encodeYAML(doc, compact)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeDocument(doc, compact, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("strings %q %q %q (compact %v):\nemitter:\n%s\nplaceholders:\n%s", s1, s2, s3, compact, want, got)
			}
			if again, _ := encodeYAML(doc, compact); again != want {
				t.Fatal("encodeDocument changed the tree it was given")
			}
		}
	}
	if quotable < 1000 {
		t.Fatalf("only %d single-quotable strings generated: the test would not exercise the placeholders", quotable)
	}
}

// A document that contains the placeholders' nonce is written by the
// emitter alone, and still correctly.
func TestQuotedNonceInDocument(t *testing.T) {
	s := `{"a":"` + strings.Repeat("x", 80) + `"}`
	doc := &textyaml.Node{Kind: textyaml.DocumentNode, Content: []*textyaml.Node{{Kind: textyaml.MappingNode, Tag: "!!map",
		Content: []*textyaml.Node{{Kind: textyaml.ScalarNode, Tag: "!!str", Value: "k"}, {Kind: textyaml.ScalarNode, Tag: "!!str", Value: s}}}}}
	want, _ := encodeYAML(doc, false)
	got, err := encodeDocument(doc, false, []byte("note: rs-q-"+quotedNonce))
	if err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}
