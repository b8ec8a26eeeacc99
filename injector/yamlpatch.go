package injector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// patchYAML applies ops to one YAML document and re-encodes it, keeping the
// key order, comments and flow/block styles of everything the patch does
// not touch.
func patchYAML(raw []byte, ops []PatchOp) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("not a single YAML document")
	}
	for _, op := range ops {
		if err := applyNodeOp(doc.Content[0], op); err != nil {
			return nil, fmt.Errorf("%s %s: %v", op.Op, op.Path, err)
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if compactSequences(raw) {
		enc.CompactSeqIndent()
	}
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// compactSequences reports whether the document writes block sequences at
// the indentation of their key ("key:\n- a", kubectl's style) rather than
// indented under it; the first sequence found decides.
func compactSequences(raw []byte) bool {
	lines := strings.Split(string(raw), "\n")
	for i := 0; i+1 < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t\r")
		if !strings.HasSuffix(l, ":") {
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
	return true
}

func applyNodeOp(root *yaml.Node, op PatchOp) error {
	tokens, err := pointerTokens(op.Path)
	if err != nil {
		return err
	}
	if len(tokens) == 0 {
		return fmt.Errorf("cannot patch the document root")
	}
	parent := root
	for _, tok := range tokens[:len(tokens)-1] {
		if parent, err = child(parent, tok); err != nil {
			return err
		}
	}
	last := tokens[len(tokens)-1]
	switch op.Op {
	case "add":
		val, err := valueNode(op.Value)
		if err != nil {
			return err
		}
		switch parent.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(parent.Content); i += 2 {
				if parent.Content[i].Value == last {
					parent.Content[i+1] = val
					return nil
				}
			}
			key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: last}
			parent.Content = append(parent.Content, key, val)
			return nil
		case yaml.SequenceNode:
			if last == "-" {
				parent.Content = append(parent.Content, val)
				return nil
			}
			i, err := index(last, len(parent.Content)+1)
			if err != nil {
				return err
			}
			parent.Content = append(parent.Content[:i], append([]*yaml.Node{val}, parent.Content[i:]...)...)
			return nil
		}
	case "remove":
		switch parent.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(parent.Content); i += 2 {
				if parent.Content[i].Value == last {
					parent.Content = append(parent.Content[:i], parent.Content[i+2:]...)
					return nil
				}
			}
			return fmt.Errorf("no member %q", last)
		case yaml.SequenceNode:
			i, err := index(last, len(parent.Content))
			if err != nil {
				return err
			}
			parent.Content = append(parent.Content[:i], parent.Content[i+1:]...)
			return nil
		}
	default:
		return fmt.Errorf("unsupported operation")
	}
	return fmt.Errorf("parent is neither a mapping nor a sequence")
}

func child(n *yaml.Node, tok string) (*yaml.Node, error) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == tok {
				return n.Content[i+1], nil
			}
		}
		return nil, fmt.Errorf("no member %q", tok)
	case yaml.SequenceNode:
		i, err := index(tok, len(n.Content))
		if err != nil {
			return nil, err
		}
		return n.Content[i], nil
	case yaml.AliasNode:
		return child(n.Alias, tok)
	}
	return nil, fmt.Errorf("%q: not a mapping or sequence", tok)
}

func index(tok string, n int) (int, error) {
	i, err := strconv.Atoi(tok)
	if err != nil || i < 0 || i >= n {
		return 0, fmt.Errorf("index %q out of range", tok)
	}
	return i, nil
}

func pointerTokens(p string) ([]string, error) {
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

// valueNode converts a patch value to block-style YAML, quoting strings
// only where YAML needs it.
func valueNode(v any) (*yaml.Node, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	n := doc.Content[0]
	plain(n)
	return n, nil
}

func plain(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}
