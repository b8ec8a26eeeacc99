package manifests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	textyaml "go.yaml.in/yaml/v3"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
)

// undoRecord is the value of contract.AnnotationUndo.
type undoRecord struct {
	// Made is what the record's own annotation created: "metadata",
	// "annotations" or "" (the annotations existed).
	Made string   `json:"made,omitempty"`
	Undo []undoOp `json:"undo"`
	// Text is the whole document as it was, kept when it was written
	// from its object (anchors and aliases expanded, keys sorted): the
	// undo operations then give back its content but not its layout.
	Text string `json:"text,omitempty"`
}

// undoOp undoes one edit of the injection; they are undone last first.
type undoOp struct {
	// Op is "remove" (the edit added Path), "replace" (it replaced the
	// value at Path) or "insert" (it removed Path).
	Op   string `json:"op"`
	Path string `json:"path"` // JSON Pointer relative to the object
	// At is the position of a removed mapping member among its
	// mapping's members.
	At int `json:"at,omitempty"`
	// Was is the replaced or removed member as the document had it: a
	// one-member mapping in YAML or JSON, with its comments and styles.
	Was string `json:"was,omitempty"`
	// Sum is a digest of the value the edit wrote (remove, replace): a
	// value edited since is not taken back.
	Sum string `json:"sum,omitempty"`
}

// undoRecorder collects the undo operations of the edits applied to one
// object. A nil recorder records nothing.
type undoRecorder struct {
	prefix  string // the object's path in the document
	asJSON  bool   // write Was as JSON, else YAML
	compact bool   // YAML block sequences flush with their key
	ops     []undoOp
}

func (r *undoRecorder) rel(path string) string { return strings.TrimPrefix(path, r.prefix) }

// added records an edit that wrote the value of digest sum at path.
func (r *undoRecorder) added(path, sum string) error {
	if r == nil {
		return nil
	}
	r.ops = append(r.ops, undoOp{Op: "remove", Path: r.rel(path), Sum: sum})
	return nil
}

// replaced records an edit that wrote the value of digest sum over old.
func (r *undoRecorder) replaced(op injector.PatchOp, sum string, key, old *textyaml.Node) error {
	if r == nil {
		return nil
	}
	was, err := r.member(key, old)
	if err != nil {
		return err
	}
	r.ops = append(r.ops, undoOp{Op: "replace", Path: r.rel(op.Path), Was: was, Sum: sum})
	return nil
}

// removed records a mapping member (key set) at position at, or a
// sequence item (key nil).
func (r *undoRecorder) removed(path string, at int, key, old *textyaml.Node) error {
	if r == nil {
		return nil
	}
	if key == nil {
		key, at = &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!str", Value: "-"}, 0
	}
	was, err := r.member(key, old)
	if err != nil {
		return err
	}
	r.ops = append(r.ops, undoOp{Op: "insert", Path: r.rel(path), At: at, Was: was})
	return nil
}

// member renders key: value as a one-member mapping in the document's
// format.
func (r *undoRecorder) member(key, val *textyaml.Node) (string, error) {
	m := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map", Content: []*textyaml.Node{key, val}}
	if r.asJSON {
		var b bytes.Buffer
		if err := nodeJSON(&b, m); err != nil {
			return "", err
		}
		return b.String(), nil
	}
	return yamledit.Encode(&textyaml.Node{Kind: textyaml.DocumentNode, Content: []*textyaml.Node{m}}, r.compact)
}

// nodeDigest is the digest of what a document holds at n, comparable with
// the digest convertValue gives a patch value.
func nodeDigest(n *textyaml.Node) (string, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return "", err
	}
	v, err := jsonValue(v)
	if err != nil {
		return "", err
	}
	return canonicalDigest(v)
}

func canonicalDigest(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8]), nil
}

// nodeJSON writes n as compact JSON, keeping the order of mapping keys.
func nodeJSON(b *bytes.Buffer, n *textyaml.Node) error {
	switch n.Kind {
	case textyaml.DocumentNode:
		if len(n.Content) != 1 {
			return fmt.Errorf("not a single document")
		}
		return nodeJSON(b, n.Content[0])
	case textyaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := jsonString(b, n.Content[i].Value); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := nodeJSON(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	case textyaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := nodeJSON(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case textyaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str", "!!binary", "!!timestamp":
			return jsonString(b, n.Value)
		case "!!null":
			b.WriteString("null")
			return nil
		case "!!bool", "!!int", "!!float":
			if json.Valid([]byte(n.Value)) {
				b.WriteString(n.Value)
				return nil
			}
			var v any
			if err := n.Decode(&v); err != nil {
				return err
			}
			v, err := jsonValue(v)
			if err != nil {
				return err
			}
			out, err := json.Marshal(v)
			if err != nil {
				return err
			}
			b.Write(out)
			return nil
		}
	}
	return fmt.Errorf("line %d: cannot be written as JSON", n.Line)
}

func jsonString(b *bytes.Buffer, s string) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// applyWithUndo applies ops to the document tree root (its top node, owned
// by the caller) and, for every object root in roots ("" for the document,
// "/items/K" for an item of a List), records how to undo the ops below it
// in contract.AnnotationUndo on that object. It returns the operations that add
// those annotations, which it has applied too.
func applyWithUndo(root *textyaml.Node, owned map[*textyaml.Node]bool, ops []injector.PatchOp, roots []string, asJSON, compact bool) ([]injector.PatchOp, error) {
	return applyWithUndoText(root, owned, ops, roots, asJSON, compact, "")
}

// applyWithUndoText is applyWithUndo keeping text, the document as it
// was, in the record of a document with one object.
func applyWithUndoText(root *textyaml.Node, owned map[*textyaml.Node]bool, ops []injector.PatchOp, roots []string, asJSON, compact bool, text string) ([]injector.PatchOp, error) {
	var recordOps []injector.PatchOp
	done := 0
	for ri, r := range roots {
		rec := &undoRecorder{prefix: r, asJSON: asJSON, compact: compact}
		// The ops of one object are contiguous: InjectManifests appends
		// them object by object.
		for done < len(ops) && under(ops[done].Path, r, roots[ri+1:]) {
			op := ops[done]
			if err := applyNodeOp(root, op, owned, rec); err != nil {
				return nil, fmt.Errorf("%s %s: %v", op.Op, op.Path, err)
			}
			done++
		}
		if len(rec.ops) == 0 {
			continue
		}
		keep := ""
		if len(roots) == 1 && r == "" {
			keep = text
		}
		op, err := recordOp(root, r, rec, keep)
		if err != nil {
			return nil, err
		}
		if err := applyNodeOp(root, op, owned, nil); err != nil {
			return nil, fmt.Errorf("%s %s: %v", op.Op, op.Path, err)
		}
		recordOps = append(recordOps, op)
	}
	if done != len(ops) {
		return nil, fmt.Errorf("%s %s: outside the injected objects", ops[done].Op, ops[done].Path)
	}
	return recordOps, nil
}

// under: path belongs to the object at r rather than to a later one.
func under(path, r string, later []string) bool {
	if r != "" && !strings.HasPrefix(path, r+"/") {
		return false
	}
	for _, l := range later {
		if strings.HasPrefix(path, l+"/") {
			return false
		}
	}
	return true
}

// recordOp is the operation that stores rec on the object at r, whose
// metadata or annotations may be missing.
func recordOp(root *textyaml.Node, r string, rec *undoRecorder, text string) (injector.PatchOp, error) {
	obj, err := yamledit.NodeAt(root, r)
	if err != nil {
		return injector.PatchOp{}, err
	}
	record := undoRecord{Undo: rec.ops, Text: text}
	meta := yamledit.Member(obj, "metadata")
	var path string
	var value func(string) any
	switch {
	case meta == nil || meta.Kind != textyaml.MappingNode:
		record.Made = "metadata"
		path = r + "/metadata"
		value = func(s string) any {
			return map[string]any{"annotations": map[string]string{contract.AnnotationUndo: s}}
		}
	case yamledit.Member(meta, "annotations") == nil || yamledit.Member(meta, "annotations").Kind != textyaml.MappingNode:
		record.Made = "annotations"
		path = r + "/metadata/annotations"
		value = func(s string) any { return map[string]string{contract.AnnotationUndo: s} }
	default:
		path = r + "/metadata/annotations/" + yamledit.EscapeToken(contract.AnnotationUndo)
		value = func(s string) any { return s }
	}
	b, err := json.Marshal(record)
	if err != nil {
		return injector.PatchOp{}, err
	}
	return injector.PatchOp{Op: "add", Path: path, Value: value(string(b))}, nil
}
