package injector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	yaml "go.yaml.in/yaml/v3"
)

// patchYAML applies ops to one YAML document and re-encodes it, keeping the
// key order, comments and flow/block styles of everything the patch does
// not touch.
func patchYAML(raw []byte, parsed *yaml.Node, ops []PatchOp) ([]byte, error) {
	var doc yaml.Node
	if parsed != nil {
		doc = *cloneNode(parsed)
	} else if err := yaml.Unmarshal(raw, &doc); err != nil {
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
		// Editing through an alias would also edit its anchor; the
		// caller falls back to writing the object.
		return nil, fmt.Errorf("%q: path goes through an alias", tok)
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

// valueNode converts a patch value to block-style YAML, keeping the key
// order of its JSON encoding and quoting strings only where YAML needs it.
// It reads the JSON tokens directly: parsing the JSON as YAML costs ten
// times more.
func valueNode(v any) (*yaml.Node, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	// The same volumes, mounts and install container go into every
	// document of a stream: convert each distinct value once.
	if n, ok := valueNodes.Load(string(b)); ok {
		return cloneNode(n.(*yaml.Node)), nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, err := tokenNode(dec)
	if err != nil {
		return nil, err
	}
	if valueNodeCount.Add(1) > 4096 {
		valueNodes.Clear()
		valueNodeCount.Store(0)
	}
	valueNodes.Store(string(b), n)
	return cloneNode(n), nil
}

var (
	valueNodes     sync.Map // JSON text → *yaml.Node, never modified
	valueNodeCount atomic.Int64
)

func tokenNode(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := tokenNode(dec)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.(string)}, v)
			}
			_, err := dec.Token() // '}'
			return n, err
		case '[':
			n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for dec.More() {
				v, err := tokenNode(dec)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
			_, err := dec.Token() // ']'
			return n, err
		}
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(t)}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}, nil
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// cloneNode deep-copies a document so that patching leaves the parsed
// original intact (a stream may be written more than once). Alias targets
// are shared: patches never reach into them.
func cloneNode(n *yaml.Node) *yaml.Node {
	c := *n
	if len(n.Content) > 0 {
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, ch := range n.Content {
			c.Content[i] = cloneNode(ch)
		}
	}
	return &c
}
