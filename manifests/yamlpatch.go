package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	// The library for YAML text (see the package documentation): the
	// maintained fork of gopkg.in/textyaml.v3 that sigs.k8s.io/yaml uses. Only
	// it can write lists at the indentation kubectl and most hand-written
	// manifests use ("- " flush with the parent key), so an injected
	// document keeps the look of its input.
	textyaml "go.yaml.in/yaml/v3"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
	"github.com/restart-supervisor/restart-supervisor/internal/yamlstyle"
)

// patchYAML applies ops to one YAML document and re-encodes it, keeping the
// key order, comments and flow/block styles of everything the patch does
// not touch.
//
// When roots is not nil, it also records how to undo ops on each object
// it names (see applyWithUndo).
func patchYAML(raw []byte, parsed *textyaml.Node, ops []injector.PatchOp, roots []string) ([]byte, error) {
	var doc textyaml.Node
	if parsed != nil {
		doc = *parsed
	} else if err := textyaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != textyaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("not a single YAML document")
	}
	// Copy on write: the parsed tree is shared with the Document (a
	// stream may be written more than once) and value nodes with a cache,
	// so every node on the way to an edit is copied before it changes.
	owned := map[*textyaml.Node]bool{}
	doc.Content = []*textyaml.Node{yamledit.Own(owned, doc.Content[0])}
	compact := yamlstyle.CompactSequences(raw, true)
	if roots != nil {
		if _, err := applyWithUndo(doc.Content[0], owned, ops, roots, false, compact); err != nil {
			return nil, err
		}
	} else {
		for _, op := range ops {
			if err := applyNodeOp(doc.Content[0], op, owned, nil); err != nil {
				return nil, fmt.Errorf("%s %s: %v", op.Op, op.Path, err)
			}
		}
	}
	out, err := encodeDocument(&doc, compact, raw)
	return []byte(out), err
}

// applyNodeOp applies op to the tree at root. When rec is not nil, it
// also records how to undo op (see undoRecorder).
func applyNodeOp(root *textyaml.Node, op injector.PatchOp, owned map[*textyaml.Node]bool, rec *undoRecorder) error {
	tokens, err := yamledit.PointerTokens(op.Path)
	if err != nil {
		return err
	}
	if len(tokens) == 0 {
		return fmt.Errorf("cannot patch the document root")
	}
	parent := root
	for _, tok := range tokens[:len(tokens)-1] {
		idx, err := yamledit.ChildIndex(parent, tok)
		if err != nil {
			return err
		}
		c := yamledit.Own(owned, parent.Content[idx])
		parent.Content[idx] = c
		parent = c
	}
	last := tokens[len(tokens)-1]
	parentPath := op.Path[:len(op.Path)-len(yamledit.EscapeToken(last))]
	switch op.Op {
	case "add":
		// One conversion gives the node and, for the undo record, the
		// digest of what is written.
		c, err := convertValue(op.Value)
		if err != nil {
			return err
		}
		val := c.node
		switch parent.Kind {
		case textyaml.MappingNode:
			for i := 0; i+1 < len(parent.Content); i += 2 {
				if parent.Content[i].Value == last {
					if err := rec.replaced(op, c.digest, parent.Content[i], parent.Content[i+1]); err != nil {
						return err
					}
					parent.Content[i+1] = val
					return nil
				}
			}
			key := &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!str", Value: last}
			parent.Content = append(parent.Content, key, val)
			return rec.added(op.Path, c.digest)
		case textyaml.SequenceNode:
			if last == "-" {
				parent.Content = append(parent.Content, val)
				return rec.added(parentPath+strconv.Itoa(len(parent.Content)-1), c.digest)
			}
			i, err := yamledit.Index(last, len(parent.Content)+1)
			if err != nil {
				return err
			}
			parent.Content = append(parent.Content[:i], append([]*textyaml.Node{val}, parent.Content[i:]...)...)
			return rec.added(op.Path, c.digest)
		}
	case "remove":
		switch parent.Kind {
		case textyaml.MappingNode:
			for i := 0; i+1 < len(parent.Content); i += 2 {
				if parent.Content[i].Value == last {
					if err := rec.removed(op.Path, i/2, parent.Content[i], parent.Content[i+1]); err != nil {
						return err
					}
					parent.Content = append(parent.Content[:i], parent.Content[i+2:]...)
					return nil
				}
			}
			return fmt.Errorf("no member %q", last)
		case textyaml.SequenceNode:
			i, err := yamledit.Index(last, len(parent.Content))
			if err != nil {
				return err
			}
			if err := rec.removed(op.Path, i, nil, parent.Content[i]); err != nil {
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

// converted is a patch value as block-style YAML, keeping the key order
// of its JSON encoding and quoting strings only where YAML needs it, with
// the digest of its canonical JSON form for undo records. It is built
// from the JSON tokens directly: parsing the JSON as YAML costs ten times
// more.
type converted struct {
	node   *textyaml.Node // never modified
	digest string
	// uses and rendered let encodeDocument write a value that recurs
	// from text rendered once (see placeholders.go).
	uses     atomic.Int32
	rendered renderedValue
}

// convertValue converts v once per distinct value: the same volumes,
// mounts and install container go into every document of a stream.
func convertValue(v any) (*converted, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if c, ok := valueNodes.Load(string(b)); ok {
		return c.(*converted), nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, err := yamledit.FromJSON(dec)
	if err != nil {
		return nil, err
	}
	var canon any
	if err := utiljson.Unmarshal(b, &canon); err != nil {
		return nil, err
	}
	digest, err := canonicalDigest(canon)
	if err != nil {
		return nil, err
	}
	c := &converted{node: n, digest: digest}
	if valueNodeCount.Add(1) > 4096 {
		valueNodes.Clear()
		valueRoots.Clear()
		valueNodeCount.Store(0)
	}
	valueNodes.Store(string(b), c)
	valueRoots.Store(n, c)
	return c, nil
}

var (
	valueNodes     sync.Map // JSON text → *converted
	valueRoots     sync.Map // *converted.node → *converted
	valueNodeCount atomic.Int64
)
