// Package yamledit owns the edits of yaml.v3 node trees that the injector
// (inject and uninject of manifests, which keep a file's comments, key
// order and styles) and compose (the rewrite of a Compose file) share:
// members of a mapping, JSON Pointers (RFC 6901) followed through a tree,
// copy-on-write of the nodes on the way to an edit, copies, encoding, and
// the paths people read in messages. It knows nothing of Kubernetes or
// Compose and does no I/O.
package yamledit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	textyaml "go.yaml.in/yaml/v3"
)

// Member is the value of key in the mapping n (its own keys, not those of
// a merge key), nil when n is not a mapping or has no such key.
func Member(n *textyaml.Node, key string) *textyaml.Node {
	if n == nil || n.Kind != textyaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// DeleteMember removes key from the mapping n; a comment above the key
// goes with it.
func DeleteMember(n *textyaml.Node, key string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content = append(n.Content[:i], n.Content[i+2:]...)
			return
		}
	}
}

// EscapeToken is one token of a JSON Pointer as RFC 6901 writes it: "~"
// as "~0", "/" as "~1"; PointerTokens reads it back.
func EscapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// PointerTokens splits a JSON Pointer into its unescaped reference tokens;
// "" (the whole document) has none.
func PointerTokens(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("JSON pointer must start with /")
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

// ChildIndex locates the child named by tok in n.Content: the value of the
// member tok of a mapping, the element tok of a sequence. A child that is
// an alias or carries an anchor is an error: an edit there would change
// every place that refers to it, so the caller writes the object again,
// aliases expanded, instead.
func ChildIndex(n *textyaml.Node, tok string) (int, error) {
	var i int
	switch n.Kind {
	case textyaml.MappingNode:
		i = -1
		for k := 0; k+1 < len(n.Content); k += 2 {
			if n.Content[k].Value == tok {
				i = k + 1
				break
			}
		}
		if i < 0 {
			return 0, fmt.Errorf("no member %q", tok)
		}
	case textyaml.SequenceNode:
		var err error
		if i, err = Index(tok, len(n.Content)); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("%q: not a mapping or sequence", tok)
	}
	if c := n.Content[i]; c.Kind == textyaml.AliasNode || c.Anchor != "" {
		return 0, fmt.Errorf("%q: path goes through an anchor or alias", tok)
	}
	return i, nil
}

// Index is the sequence index tok names, in [0, n).
func Index(tok string, n int) (int, error) {
	i, err := strconv.Atoi(tok)
	if err != nil || i < 0 || i >= n {
		return 0, fmt.Errorf("index %q out of range", tok)
	}
	return i, nil
}

// NodeAt follows the JSON Pointer p from n, without copying.
func NodeAt(n *textyaml.Node, p string) (*textyaml.Node, error) {
	toks, err := PointerTokens(p)
	if err != nil {
		return nil, err
	}
	for _, t := range toks {
		i, err := ChildIndex(n, t)
		if err != nil {
			return nil, err
		}
		n = n.Content[i]
	}
	return n, nil
}

// Own returns a shallow copy of n that may be edited, recorded in owned,
// or n when owned holds it already. The tree being edited is shared (with
// a parsed document that may be written more than once, with a cache of
// values), so every node on the way to an edit is copied before it
// changes.
func Own(owned map[*textyaml.Node]bool, n *textyaml.Node) *textyaml.Node {
	if owned[n] {
		return n
	}
	c := *n
	c.Content = append([]*textyaml.Node(nil), n.Content...)
	owned[&c] = true
	return &c
}

// OwnedPath follows the JSON Pointer p from root (owned by the caller),
// copying every node on the way (Own) so that the last one may be edited.
func OwnedPath(root *textyaml.Node, owned map[*textyaml.Node]bool, p string) (*textyaml.Node, error) {
	toks, err := PointerTokens(p)
	if err != nil {
		return nil, err
	}
	n := root
	for _, t := range toks {
		i, err := ChildIndex(n, t)
		if err != nil {
			return nil, err
		}
		c := Own(owned, n.Content[i])
		n.Content[i] = c
		n = c
	}
	return n, nil
}

// DeepCopy copies n and everything below it, without anchors, so that the
// copy can be edited and written next to the original.
func DeepCopy(n *textyaml.Node) *textyaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Anchor = ""
	c.Content = make([]*textyaml.Node, len(n.Content))
	for i, e := range n.Content {
		c.Content[i] = DeepCopy(e)
	}
	return &c
}

// Encode writes doc as YAML indented by two spaces; compact puts a
// sequence's "- " flush with its parent key, as kubectl does
// (internal/yamlstyle tells which a file uses).
func Encode(doc *textyaml.Node, compact bool) (string, error) {
	var buf bytes.Buffer
	enc := textyaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if compact {
		enc.CompactSeqIndent()
	}
	if err := enc.Encode(doc); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// FromJSON reads one JSON value from dec (which must UseNumber) as a node
// tree in block style, keeping the order of object members: strings are
// !!str scalars, numbers !!int or !!float, as the JSON text wrote them.
// Reading the tokens costs a tenth of parsing the JSON text as YAML.
func FromJSON(dec *json.Decoder) (*textyaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map"}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := FromJSON(dec)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!str", Value: k.(string)}, v)
			}
			_, err := dec.Token() // '}'
			return n, err
		case '[':
			n := &textyaml.Node{Kind: textyaml.SequenceNode, Tag: "!!seq"}
			for dec.More() {
				v, err := FromJSON(dec)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
			_, err := dec.Token() // ']'
			return n, err
		}
	case string:
		return &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!str", Value: t}, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return &textyaml.Node{Kind: textyaml.ScalarNode, Tag: tag, Value: string(t)}, nil
	case bool:
		return &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}, nil
	case nil:
		return &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// Dotted renders a path for people: spec.replicatedJobs[0].template.
func Dotted(path []string) string {
	return render(path, func(string) bool { return false })
}

// FieldPath renders a JSON Pointer as an API field path for messages:
// spec.containers[0].command, metadata.annotations[restart-supervisor.dev/status]
// (a key with a dot or a slash in brackets). A malformed pointer is
// returned as it is.
func FieldPath(p string) string {
	toks, err := PointerTokens(p)
	if err != nil {
		return p
	}
	return render(toks, func(t string) bool { return strings.ContainsAny(t, "./") })
}

// render joins path with dots, an index (a number after the first token)
// and every token bracket says so in brackets.
func render(path []string, bracket func(string) bool) string {
	var b strings.Builder
	for i, t := range path {
		if _, err := strconv.Atoi(t); err == nil && i > 0 {
			b.WriteString("[" + t + "]")
			continue
		}
		if bracket(t) {
			b.WriteString("[" + t + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}
