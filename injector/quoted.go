package injector

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"

	textyaml "go.yaml.in/yaml/v3"
)

// Long JSON values written into YAML documents (the undo record, the
// status annotation, RESTART_SUPERVISOR_CONFIG) are most of the text an
// injection adds: about 1.3 KB of a 3.5 KB Deployment. The emitter
// analyses such a scalar byte by byte, twice, to pick its style, which
// made up a sixth of the time spent writing a document. For the strings
// where the outcome is known in advance it is skipped: the tree is
// written with a short placeholder in their place, and each placeholder
// is then replaced by the single-quoted text the emitter would have
// written (TestQuotedMatchesEmitter compares the two).

// minQuotedLen is the length from which a scalar is worth a placeholder.
const minQuotedLen = 64

// quotedNonce makes placeholders that no document contains; a document
// that does is written the ordinary way.
var quotedNonce = func() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "0000000000000000"
	}
	return hex.EncodeToString(b[:])
}()

// singleQuotable reports whether the emitter writes s, a !!str value of
// no particular style, as exactly singleQuoted(s): printable ASCII
// without tabs or line breaks (so single quotes are allowed and nothing
// is escaped or folded; the encoder's width is unlimited), and starting
// with a flow indicator, so that it is neither written plain nor resolves
// to another tag.
func singleQuotable(s string) bool {
	if len(s) < minQuotedLen || (s[0] != '{' && s[0] != '[') || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func singleQuoted(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

type quotedSub struct {
	placeholder, text string
}

// withPlaceholders returns n, or a copy of it sharing every subtree it
// did not change, in which each single-quotable value scalar of a block
// collection is a placeholder; subs collects what each one stands for.
// n itself is never modified: its nodes may be shared with the parsed
// document and with the value cache.
func withPlaceholders(n *textyaml.Node, subs *[]quotedSub) *textyaml.Node {
	if n.Kind != textyaml.DocumentNode && n.Kind != textyaml.MappingNode && n.Kind != textyaml.SequenceNode {
		return n
	}
	if n.Style&textyaml.FlowStyle != 0 {
		return n // flow collections are written as they are
	}
	var content []*textyaml.Node
	for i, c := range n.Content {
		var r *textyaml.Node
		isKey := n.Kind == textyaml.MappingNode && i%2 == 0
		switch {
		case isKey:
			r = c
		case c.Kind == textyaml.ScalarNode:
			r = c
			if c.Style == 0 && c.Tag == "!!str" && c.Anchor == "" && c.HeadComment == "" && c.LineComment == "" &&
				c.FootComment == "" && singleQuotable(c.Value) {
				p := "rs-q-" + quotedNonce + "-" + strconv.Itoa(len(*subs)) + "-x"
				*subs = append(*subs, quotedSub{placeholder: p, text: singleQuoted(c.Value)})
				r = &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!str", Value: p}
			}
		default:
			r = withPlaceholders(c, subs)
		}
		if r != c && content == nil {
			content = append([]*textyaml.Node(nil), n.Content...)
		}
		if content != nil {
			content[i] = r
		}
	}
	if content == nil {
		return n
	}
	c := *n
	c.Content = content
	return &c
}

// encodeDocument writes a document as encodeYAML does, quoting its long
// JSON values without the emitter. raw is the document's text, which no
// placeholder may occur in.
func encodeDocument(doc *textyaml.Node, compact bool, raw []byte) (string, error) {
	if bytes.Contains(raw, []byte(quotedNonce)) {
		return encodeYAML(doc, compact)
	}
	var subs []quotedSub
	tree := withPlaceholders(doc, &subs)
	out, err := encodeYAML(tree, compact)
	if err != nil || len(subs) == 0 {
		return out, err
	}
	for _, s := range subs {
		if strings.Count(out, s.placeholder) != 1 {
			return encodeYAML(doc, compact)
		}
	}
	pairs := make([]string, 0, 2*len(subs))
	for _, s := range subs {
		pairs = append(pairs, s.placeholder, s.text)
	}
	return strings.NewReplacer(pairs...).Replace(out), nil
}
