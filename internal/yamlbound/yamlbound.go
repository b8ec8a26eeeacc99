// Package yamlbound checks a YAML node tree before yaml.v3 decodes it into
// Go values, so that what a hostile document costs to decode follows its
// size, not what its aliases and its mappings make of it.
//
// yaml.v3's decoder compares every pair of keys of each mapping it decodes,
// and records one message for each pair that is equal: 36 kB of repeated
// keys took `restart-injector inject` past 2 GB. Aliases are decoded anew
// each time they appear, so a small document can stand for a huge one.
// Check walks the tree once (each anchored node once, whatever the number
// of aliases to it), refuses a key given twice in a mapping (yaml.v3 would
// refuse it too, quadratically), and adds up the nodes and key
// comparisons the decoder will do, aliases expanded, against a budget.
package yamlbound

import (
	"fmt"

	textyaml "go.yaml.in/yaml/v3"
)

// Budget is what the decoding of one tree may cost.
type Budget struct {
	// AliasNodes bounds the nodes aliases add once expanded: decoding the
	// tree creates at most its own nodes plus these.
	AliasNodes int
	// KeyComparisons bounds the pairs of keys the decoder compares, over
	// every mapping it decodes (k keys: k(k-1)/2 pairs).
	KeyComparisons int
}

// Default is the budget of the offline readers (inject, uninject, compose):
// a million nodes from aliases (about 100 MiB of decoded values at worst)
// and 2^26 key comparisons (a fraction of a second; a mapping of 11 000
// keys). Real manifests and Compose files use a small part of either.
var Default = Budget{AliasNodes: 1 << 20, KeyComparisons: 1 << 26}

// cost is what decoding a subtree does.
type cost struct{ nodes, pairs int }

type walker struct {
	b        Budget
	memo     map[*textyaml.Node]cost // anchored nodes walked
	visiting map[*textyaml.Node]bool
	tree     int // nodes of the tree itself
}

// Check returns an error naming the line and the bound that decoding n
// would pass, or nil. It takes time linear in the tree.
func Check(n *textyaml.Node, b Budget) error {
	_, err := b.take(n)
	return err
}

// Take is Check of n against what is left of b, which it then lowers by
// n's cost: for the several trees one document brings (the members an
// undo record gives back), so that together they stay within b.
func (b *Budget) Take(n *textyaml.Node) error {
	c, err := b.take(n)
	if err != nil {
		return err
	}
	b.AliasNodes -= c.nodes - c.tree
	b.KeyComparisons -= c.pairs
	return nil
}

type spent struct{ nodes, tree, pairs int }

func (b Budget) take(n *textyaml.Node) (spent, error) {
	w := &walker{b: b, memo: map[*textyaml.Node]cost{}, visiting: map[*textyaml.Node]bool{}}
	c, err := w.walk(n)
	if err == nil {
		err = w.check(c, n)
	}
	return spent{c.nodes, w.tree, c.pairs}, err
}

func (w *walker) check(c cost, n *textyaml.Node) error {
	if c.nodes-w.tree > w.b.AliasNodes {
		return fmt.Errorf("line %d: aliases expand the document by more than %d nodes", n.Line, w.b.AliasNodes)
	}
	if c.pairs > w.b.KeyComparisons {
		return fmt.Errorf("line %d: its mappings hold more than %d pairs of keys to compare, aliases expanded", n.Line, w.b.KeyComparisons)
	}
	return nil
}

// walk returns the cost of decoding n, aliases expanded. Costs are
// clipped just past the budget so that they cannot overflow.
func (w *walker) walk(n *textyaml.Node) (cost, error) {
	if n == nil {
		return cost{}, nil
	}
	if n.Kind == textyaml.AliasNode {
		if n.Alias == nil {
			return cost{1, 0}, nil
		}
		c, err := w.walk(n.Alias)
		if err != nil {
			return c, err
		}
		// The tree counts the alias node itself once; its expansion
		// is what the decoder adds.
		return cost{1 + c.nodes, c.pairs}, nil
	}
	if c, ok := w.memo[n]; ok {
		return c, nil
	}
	if n.Anchor != "" {
		// Only an anchored node can be reached again, through an alias.
		if w.visiting[n] {
			return cost{}, fmt.Errorf("line %d: anchor %.64q contains an alias to itself", n.Line, n.Anchor)
		}
		w.visiting[n] = true
		defer delete(w.visiting, n)
	}
	w.tree++

	c := cost{nodes: 1}
	if n.Kind == textyaml.MappingNode {
		k := len(n.Content) / 2
		c.pairs = k * (k - 1) / 2
		if k > 1<<16 {
			c.pairs = w.b.KeyComparisons + 1
		}
		type keyOf struct {
			kind  textyaml.Kind
			value string
		}
		seen := make(map[keyOf]int, k)
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn := n.Content[i]
			// yaml.v3's test of a repeated key: same kind, same value.
			key := keyOf{kn.Kind, kn.Value}
			if line, dup := seen[key]; dup {
				return c, fmt.Errorf("line %d: mapping key %.64q already defined at line %d", kn.Line, kn.Value, line)
			}
			seen[key] = kn.Line
		}
	}
	for _, child := range n.Content {
		cc, err := w.walk(child)
		if err != nil {
			return c, err
		}
		c.nodes = min(c.nodes+cc.nodes, w.tree+w.b.AliasNodes+1)
		c.pairs = min(c.pairs+cc.pairs, w.b.KeyComparisons+1)
		if err := w.check(c, n); err != nil {
			return c, err
		}
	}
	if n.Anchor != "" {
		w.memo[n] = c
	}
	return c, nil
}
