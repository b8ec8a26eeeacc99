package manifests

import (
	"math/rand/v2"
	"strings"
	"testing"

	textyaml "go.yaml.in/yaml/v3"

	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
)

// placeholderTrees makes random documents of the shapes encodeDocument
// meets: block mappings and sequences, nested, holding short and long
// strings (some single-quotable, some not) and converted patch values
// drawn from a small pool, so that most of them recur, under keys the
// emitter writes plainly and keys it does not.
type placeholderTrees struct {
	rng  *rand.Rand
	pool []*converted
}

func (g *placeholderTrees) str() string {
	const alphabet = `abcXYZ019 '"{}[],:#&*!|>%@-?\/` + "`"
	var b strings.Builder
	b.WriteByte("{[a"[g.rng.IntN(3)])
	n := g.rng.IntN(200)
	odd := 1 << 20 // most strings are single-quotable when they start with { or [
	if g.rng.IntN(4) == 0 {
		odd = 40
	}
	for i := 0; i < n; i++ {
		switch g.rng.IntN(odd) {
		case 0:
			b.WriteString("é") // not ASCII: left to the emitter
		case 1:
			b.WriteByte('\t')
		case 2:
			b.WriteByte('\n')
		default:
			b.WriteByte(alphabet[g.rng.IntN(len(alphabet))])
		}
	}
	if g.rng.IntN(10) == 0 {
		b.WriteByte(' ')
	}
	return b.String()
}

// value is a JSON value of the kinds patches carry.
func (g *placeholderTrees) value(depth int) any {
	switch k := g.rng.IntN(8); {
	case depth > 2 || k < 3:
		switch g.rng.IntN(6) {
		case 0:
			return g.rng.IntN(100)
		case 1:
			return g.rng.IntN(2) == 0
		case 2:
			return "line one\n\nline three\n"
		case 3:
			return g.str()
		}
		return []string{"name", "true", "8080", "a b", ""}[g.rng.IntN(5)]
	case k < 6:
		m := map[string]any{}
		for i, n := 0, g.rng.IntN(4); i < n; i++ {
			m[[]string{"name", "image", "true", "with space", "x.y-z", "1st"}[g.rng.IntN(6)]] = g.value(depth + 1)
		}
		return m
	default:
		var l []any
		for i, n := 0, g.rng.IntN(4); i < n; i++ {
			l = append(l, g.value(depth+1))
		}
		return l
	}
}

func (g *placeholderTrees) scalar(s string) *textyaml.Node {
	return &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!str", Value: s}
}

func (g *placeholderTrees) node(t *testing.T, depth int) *textyaml.Node {
	switch k := g.rng.IntN(10); {
	case k < 3:
		return g.scalar(g.str())
	case k < 6 || depth > 3:
		return g.pool[g.rng.IntN(len(g.pool))].node
	case k < 8:
		m := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map"}
		if g.rng.IntN(8) == 0 {
			m.Style = textyaml.FlowStyle
		}
		for i, n := 0, 1+g.rng.IntN(4); i < n; i++ {
			key := []string{"env", "initContainers", "a.b", "true", "with space", "readinessProbe", "x-y"}[g.rng.IntN(7)]
			m.Content = append(m.Content, g.scalar(key), g.node(t, depth+1))
		}
		return m
	default:
		s := &textyaml.Node{Kind: textyaml.SequenceNode, Tag: "!!seq"}
		for i, n := 0, 1+g.rng.IntN(3); i < n; i++ {
			s.Content = append(s.Content, g.node(t, depth+1))
		}
		return s
	}
}

// TestPlaceholdersMatchEmitter writes random documents both through the
// emitter alone and through encodeDocument: the bytes must be the same,
// the first time a converted value is met (rendered inline) and every time
// after (written from its cached text).
func TestPlaceholdersMatchEmitter(t *testing.T) {
	g := &placeholderTrees{rng: rand.New(rand.NewPCG(1, 2))}
	for i := 0; i < 40; i++ {
		c, err := convertValue(g.value(0))
		if err != nil {
			t.Fatal(err)
		}
		g.pool = append(g.pool, c)
	}
	subs := map[substitutionKind]int{}
	for i := 0; i < 3000; i++ {
		root := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map"}
		for k, n := 0, 1+g.rng.IntN(4); k < n; k++ {
			root.Content = append(root.Content, g.scalar([]string{"metadata", "spec", "items", "data"}[k]), g.node(t, 0))
		}
		doc := &textyaml.Node{Kind: textyaml.DocumentNode, Content: []*textyaml.Node{root}}
		for _, compact := range []bool{false, true} {
			want, err := yamledit.Encode(doc, compact)
			if err != nil {
				t.Fatal(err)
			}
			p := &placeholders{compact: compact}
			p.withPlaceholders(doc)
			for _, s := range p.subs {
				subs[s.kind]++
			}
			got, err := encodeDocument(doc, compact, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("document %d (compact %v):\nemitter:\n%s\nplaceholders:\n%s", i, compact, want, got)
			}
			if again, _ := yamledit.Encode(doc, compact); again != want {
				t.Fatal("encodeDocument changed the tree it was given")
			}
		}
	}
	for _, k := range []substitutionKind{quotedString, mappingValue, sequenceItem} {
		if subs[k] < 500 {
			t.Errorf("only %d substitutions of kind %d: the test would not exercise them", subs[k], k)
		}
	}
}

// A document that contains the placeholders' nonce is written by the
// emitter alone, and still correctly.
func TestPlaceholderNonceInDocument(t *testing.T) {
	s := `{"a":"` + strings.Repeat("x", 80) + `"}`
	doc := &textyaml.Node{Kind: textyaml.DocumentNode, Content: []*textyaml.Node{{Kind: textyaml.MappingNode, Tag: "!!map",
		Content: []*textyaml.Node{{Kind: textyaml.ScalarNode, Tag: "!!str", Value: "k"}, {Kind: textyaml.ScalarNode, Tag: "!!str", Value: s}}}}}
	want, _ := yamledit.Encode(doc, false)
	got, err := encodeDocument(doc, false, []byte("note: rs-p-"+placeholderNonce))
	if err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}
