package manifests

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"

	textyaml "go.yaml.in/yaml/v3"

	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
)

// Writing a document with go.yaml.in/yaml/v3's emitter is most of the
// cost of `inject`, and most of what it writes is the injection itself:
// the install container, the volumes and mounts, the probe, repeated in
// every document, and long JSON values (the undo record, the status
// annotation, RESTART_SUPERVISOR_CONFIG) that the emitter analyses byte by
// byte to choose their quotes. encodeDocument writes those parts without
// the emitter where their text is known in advance:
//
//   - a long single-quotable string is written in single quotes, as the
//     emitter would;
//   - a block collection converted from a patch value (see convertValue)
//     that a previous document already used is written from its text as
//     the emitter wrote it once, shifted to the column it lands on.
//
// The tree is written with a short placeholder in each such place, and
// every placeholder is then replaced. TestPlaceholdersMatchEmitter holds
// the result to the emitter's own bytes; anything unexpected (a
// placeholder not found exactly once, or not where it should be) falls
// back to the emitter alone.

// minQuotedLen is the length from which a string is worth a placeholder.
const minQuotedLen = 64

// placeholderNonce makes placeholders that no document contains; a
// document that does is written the ordinary way.
var placeholderNonce = func() string {
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

// plainKey reports whether the emitter writes k, a mapping key, as it is
// (a letter, then letters, digits, '_', '.' or '-'; at most 63 bytes): a
// placeholder's column is counted back from the key.
func plainKey(k string) bool {
	if len(k) == 0 || len(k) > 63 || !isLetter(k[0]) {
		return false
	}
	for i := 1; i < len(k); i++ {
		if c := k[i]; !isLetter(c) && (c < '0' || c > '9') && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// nonStringWords resolve to booleans or null when plain.
var nonStringWords = map[string]bool{"true": true, "false": true, "null": true, "True": true, "False": true,
	"Null": true, "TRUE": true, "FALSE": true, "NULL": true}

func simpleKey(k *textyaml.Node) bool {
	return k.Kind == textyaml.ScalarNode && k.Style == 0 && k.Tag == "!!str" && k.Anchor == "" &&
		k.HeadComment == "" && k.LineComment == "" && k.FootComment == "" &&
		plainKey(k.Value) && !nonStringWords[k.Value]
}

func noComments(n *textyaml.Node) bool {
	return n.Anchor == "" && n.HeadComment == "" && n.LineComment == "" && n.FootComment == ""
}

type substitutionKind int

const (
	quotedString substitutionKind = iota // the placeholder is the string's text
	mappingValue                         // "key: PH\n" is "key:\n" and the block below it
	sequenceItem                         // "- PH\n" is the item's lines from its dash
)

type substitution struct {
	placeholder string
	kind        substitutionKind
	text        string // quotedString: the quoted text; else the block at column 0
}

// renderedValue is a converted value as the emitter writes it in each
// context, at column 0: for a mapping value the lines below "key:", for a
// sequence item the lines from its dash. Index: [compact][sequenceItem].
type renderedValue [2][2]atomic.Pointer[string]

// placeholders collects the substitutions of one document.
type placeholders struct {
	compact bool
	subs    []substitution
}

func (p *placeholders) add(kind substitutionKind, text string) *textyaml.Node {
	ph := "rs-p-" + placeholderNonce + "-" + strconv.Itoa(len(p.subs)) + "-x"
	p.subs = append(p.subs, substitution{placeholder: ph, kind: kind, text: text})
	return &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!str", Value: ph}
}

// reusable is the text of n, a child of a block collection, if n is a
// converted value that an earlier document used too: it is rendered the
// second time it is met and taken from the cache after that.
func (p *placeholders) reusable(n *textyaml.Node, kind substitutionKind) (string, bool) {
	if (n.Kind != textyaml.MappingNode && n.Kind != textyaml.SequenceNode) || len(n.Content) == 0 ||
		n.Style&textyaml.FlowStyle != 0 || !noComments(n) || (kind == sequenceItem && n.Kind != textyaml.MappingNode) {
		return "", false
	}
	v, ok := valueRoots.Load(n)
	if !ok {
		return "", false
	}
	c := v.(*converted)
	if c.uses.Add(1) < 2 {
		return "", false
	}
	ci, ki := 0, 0
	if p.compact {
		ci = 1
	}
	if kind == sequenceItem {
		ki = 1
	}
	slot := &c.rendered[ci][ki]
	if s := slot.Load(); s != nil {
		return *s, true
	}
	s, ok := renderAlone(n, kind, p.compact)
	if !ok {
		return "", false
	}
	slot.Store(&s)
	return s, true
}

// renderAlone writes n as the value of a key, or as the item of a
// sequence, at column 0.
func renderAlone(n *textyaml.Node, kind substitutionKind, compact bool) (string, bool) {
	var wrapper *textyaml.Node
	if kind == mappingValue {
		wrapper = &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map", Content: []*textyaml.Node{
			{Kind: textyaml.ScalarNode, Tag: "!!str", Value: "k"}, n}}
	} else {
		wrapper = &textyaml.Node{Kind: textyaml.SequenceNode, Tag: "!!seq", Content: []*textyaml.Node{n}}
	}
	out, err := yamledit.Encode(&textyaml.Node{Kind: textyaml.DocumentNode, Content: []*textyaml.Node{wrapper}}, compact)
	if err != nil {
		return "", false
	}
	if kind == mappingValue {
		body, ok := strings.CutPrefix(out, "k:\n")
		return body, ok
	}
	return out, strings.HasPrefix(out, "- ")
}

// withPlaceholders returns n, or a copy of it sharing every subtree it
// did not change, with placeholders where encodeDocument can write the
// text itself. n itself is never modified: its nodes may be shared with
// the parsed document and with the value cache.
func (p *placeholders) withPlaceholders(n *textyaml.Node) *textyaml.Node {
	if n.Kind != textyaml.DocumentNode && n.Kind != textyaml.MappingNode && n.Kind != textyaml.SequenceNode {
		return n
	}
	if n.Style&textyaml.FlowStyle != 0 {
		return n // flow collections are written as they are
	}
	var content []*textyaml.Node
	for i, c := range n.Content {
		r := c
		isKey := n.Kind == textyaml.MappingNode && i%2 == 0
		switch {
		case isKey || n.Kind == textyaml.DocumentNode:
			if !isKey {
				r = p.withPlaceholders(c)
			}
		case c.Kind == textyaml.ScalarNode:
			if c.Style == 0 && c.Tag == "!!str" && noComments(c) && singleQuotable(c.Value) {
				r = p.add(quotedString, singleQuoted(c.Value))
			}
		case n.Kind == textyaml.MappingNode && simpleKey(n.Content[i-1]):
			if text, ok := p.reusable(c, mappingValue); ok {
				r = p.add(mappingValue, text)
			} else {
				r = p.withPlaceholders(c)
			}
		case n.Kind == textyaml.SequenceNode:
			if text, ok := p.reusable(c, sequenceItem); ok {
				r = p.add(sequenceItem, text)
			} else {
				r = p.withPlaceholders(c)
			}
		default:
			r = p.withPlaceholders(c)
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

// shift indents every non-empty line of block by col spaces; the first
// line's indentation is left to the caller when skipFirst is set.
func shift(b *strings.Builder, block string, col int, skipFirst bool) {
	pad := strings.Repeat(" ", col)
	first := true
	for block != "" {
		line, rest, _ := strings.Cut(block, "\n")
		if line != "" && !(first && skipFirst) {
			b.WriteString(pad)
		}
		b.WriteString(line)
		b.WriteByte('\n')
		block, first = rest, false
	}
}

// encodeDocument writes a document exactly as encodeYAML does, with the
// parts described above written from known text. raw is the document's
// text, which no placeholder may occur in.
func encodeDocument(doc *textyaml.Node, compact bool, raw []byte) (string, error) {
	if bytes.Contains(raw, []byte(placeholderNonce)) {
		return yamledit.Encode(doc, compact)
	}
	p := &placeholders{compact: compact}
	tree := p.withPlaceholders(doc)
	out, err := yamledit.Encode(tree, compact)
	if err != nil || len(p.subs) == 0 {
		return out, err
	}
	var b strings.Builder
	b.Grow(len(out) + 2048*len(p.subs))
	rest := out
	for _, s := range p.subs {
		i := strings.Index(rest, s.placeholder)
		if i < 0 || strings.Contains(rest[i+len(s.placeholder):], s.placeholder) {
			return yamledit.Encode(doc, compact)
		}
		before, after := rest[:i], rest[i+len(s.placeholder):]
		if s.kind == quotedString {
			b.WriteString(before)
			b.WriteString(s.text)
			rest = after
			continue
		}
		// Block values end their line; their column is counted back
		// from the placeholder.
		after, ok := strings.CutPrefix(after, "\n")
		lineStart := strings.LastIndexByte(before, '\n') + 1
		col := len(before) - lineStart
		if !ok {
			return yamledit.Encode(doc, compact)
		}
		switch s.kind {
		case mappingValue:
			// "key: PH": the key starts at its own column.
			if !strings.HasSuffix(before, ": ") {
				return yamledit.Encode(doc, compact)
			}
			keyEnd := len(before) - 2
			keyStart := strings.LastIndexAny(before[:keyEnd], " \n") + 1
			if !plainKey(before[keyStart:keyEnd]) {
				return yamledit.Encode(doc, compact)
			}
			b.WriteString(before[:keyEnd])
			b.WriteString(":\n")
			shift(&b, s.text, keyStart-lineStart, false)
		case sequenceItem:
			// "- PH": the item's lines start at the dash.
			if !strings.HasSuffix(before, "- ") {
				return yamledit.Encode(doc, compact)
			}
			b.WriteString(before[:len(before)-2])
			shift(&b, s.text, col-2, true)
		}
		rest = after
	}
	b.WriteString(rest)
	return b.String(), nil
}
