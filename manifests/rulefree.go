package manifests

import (
	"strings"

	textyaml "go.yaml.in/yaml/v3"
)

// A document that carries no restart rules and nothing of the injector's
// is written back as it came in, whatever it holds: a repeated mapping
// key, aliases past the decoding budget, fields of the wrong type. The API
// server accepts many such manifests (it keeps the last of two equal keys),
// so refusing them would make `inject` fail on manifests that kubectl
// applies. Whether a document is such is read off its parsed node tree in
// one pass, before anything is decoded into values, so that it costs what
// the text costs (internal/yamlbound explains why decoding may not).
//
// The test errs on the side of decoding: a document is rule-free when no
// scalar holds "restart-supervisor" (the rules and override annotations,
// the status and undo records, the supervisor's volumes), no mapping has
// the key restartPolicyRules, and no mapping that can be a container has
// the key restartPolicy. A container is an element of a list, so only a
// restartPolicy in a mapping that is the value of a key (a pod spec, a
// Kubeflow replica spec) and has no anchor (so cannot be aliased into a
// list) is let pass.

// injectorMark is in every name the injector reads or writes.
const injectorMark = "restart-supervisor"

// ruleFreeTree reports whether the YAML tree n is rule-free as above.
func ruleFreeTree(n *textyaml.Node) bool {
	return ruleFreeNode(n, false)
}

// ruleFreeNode: underKey says that n is the value of a mapping key.
func ruleFreeNode(n *textyaml.Node, underKey bool) bool {
	if n == nil {
		return true
	}
	switch n.Kind {
	case textyaml.ScalarNode:
		return !strings.Contains(n.Value, injectorMark)
	case textyaml.AliasNode:
		// The anchored node is walked where it is defined; an alias
		// only names it.
		return true
	case textyaml.MappingNode:
		containerLike := !underKey || n.Anchor != ""
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			name := k.Value
			if k.Kind == textyaml.AliasNode && k.Alias != nil {
				name = k.Alias.Value
			}
			if name == "restartPolicyRules" || (containerLike && name == "restartPolicy") {
				return false
			}
			if !ruleFreeNode(k, false) || !ruleFreeNode(n.Content[i+1], true) {
				return false
			}
		}
		return true
	}
	for _, c := range n.Content {
		if !ruleFreeNode(c, false) {
			return false
		}
	}
	return true
}

// ruleFreeValue is the same test for a decoded JSON value, which has no
// anchors; depth bounds the walk (a deeper value is not taken for
// rule-free).
func ruleFreeValue(v any, underKey bool, depth int) bool {
	if depth > 10000 {
		return false
	}
	switch t := v.(type) {
	case string:
		return !strings.Contains(t, injectorMark)
	case map[string]any:
		for k, e := range t {
			if k == "restartPolicyRules" || (!underKey && k == "restartPolicy") || strings.Contains(k, injectorMark) {
				return false
			}
			if !ruleFreeValue(e, true, depth+1) {
				return false
			}
		}
	case []any:
		for _, e := range t {
			if !ruleFreeValue(e, false, depth+1) {
				return false
			}
		}
	}
	return true
}
