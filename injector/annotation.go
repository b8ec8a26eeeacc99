package injector

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	// The library for YAML text (see the package documentation); the
	// annotation is decoded with the same one that reads the manifests.
	textyaml "go.yaml.in/yaml/v3"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/oneline"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// The restart-supervisor.dev/rules annotation: read as an adversary's
// YAML or JSON, bounded, its shape checked field by field.

// MaxRulesAnnotationSize bounds the restart-supervisor.dev/rules
// annotation. A real one is a few hundred bytes per container; the API
// server admits up to 256 KiB of annotations, and the webhook must answer
// any of them quickly and in little memory.
const MaxRulesAnnotationSize = 64 << 10

// maxContainerName is a DNS-1123 label's length, the longest container
// name Kubernetes accepts.
const maxContainerName = 63

// parseRulesAnnotation reads the restart-supervisor.dev/rules annotation:
// a YAML or JSON map from container name to the container's restart fields.
//
// The YAML decoder finds duplicate keys by comparing every pair of keys of a
// mapping, and keeps one message per pair: 2000 repeated keys in 25 kB
// took the webhook to 795 MiB, 120 000 distinct ones to 22 s of CPU. So the
// document is parsed into nodes only, checked here in one pass (sizes,
// kinds, known fields, no key twice), and each container's fields, which
// then hold at most a handful of keys per mapping, are decoded on their own.
func parseRulesAnnotation(ann map[string]string) (map[string]carried, error) {
	v, ok := ann[contract.AnnotationRules]
	if !ok {
		return nil, nil
	}
	field := "metadata.annotations[" + contract.AnnotationRules + "]"
	if len(v) > MaxRulesAnnotationSize {
		return nil, fmt.Errorf("%s: %d bytes: must be at most %d bytes", field, len(v), MaxRulesAnnotationSize)
	}
	var doc textyaml.Node
	if err := textyaml.NewDecoder(strings.NewReader(v)).Decode(&doc); err != nil {
		if err.Error() == "EOF" {
			return nil, fmt.Errorf("%s: is empty: want a map from container name to {restartPolicy, restartPolicyRules}", field)
		}
		return nil, fmt.Errorf("%s: %s", field, oneline.Error(err))
	}
	root := &doc
	if root.Kind == textyaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	m := map[string]carried{}
	if isNull(root) {
		return m, nil
	}
	if err := checkAnnotation(root, annContainers, ""); err != nil {
		return nil, fmt.Errorf("%s: %v", field, err)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		var c annEntry
		if err := root.Content[i+1].Decode(&c); err != nil {
			return nil, fmt.Errorf("%s: %s", field, oneline.Error(err))
		}
		e, err := c.carried()
		if err != nil {
			return nil, fmt.Errorf("%s: container %q: %v", field, root.Content[i].Value, err)
		}
		m[root.Content[i].Value] = e
	}
	return m, nil
}

// carried is one container's entry of the annotation: its restart fields
// and the supervisor's limits. It is written as JSON (carryRules), both
// flattened into one object as in the supervisor's config.
type carried struct {
	rules.Container
	rules.Limits
	// Backoff is the container's in-place back-off where it is not the
	// injector's (Options.Backoff).
	Backoff rules.Backoff `json:"backoff,omitzero"`
}

// annEntry is an entry as the annotation's YAML library decodes it; the
// window is a string here, since rules.Duration decodes through the
// config's YAML library, not this one.
type annEntry struct {
	rules.Container `yaml:",inline"`
	RestartBudget   *struct {
		MaxRestarts *int32  `yaml:"maxRestarts"`
		Window      *string `yaml:"window"`
	} `yaml:"restartBudget"`
	HandOverExitCodes []int32                `yaml:"handOverExitCodes"`
	PreRestartCheck   *rules.PreRestartCheck `yaml:"preRestartCheck"`
	Progress          *rules.Progress        `yaml:"progress"`
	Watchdog          *rules.Watchdog        `yaml:"watchdog"`
	Escalation        *struct {
		Window *string                `yaml:"window"`
		Steps  []rules.EscalationStep `yaml:"steps"`
	} `yaml:"escalation"`
	Backoff *struct {
		Initial *string `yaml:"initial"`
		Max     *string `yaml:"max"`
	} `yaml:"backoff"`
}

func (a annEntry) carried() (carried, error) {
	c := carried{Container: a.Container, Limits: rules.Limits{HandOverExitCodes: a.HandOverExitCodes, PreRestartCheck: a.PreRestartCheck, Progress: a.Progress, Watchdog: a.Watchdog}}
	if b := a.Backoff; b != nil {
		for _, f := range []struct {
			name string
			v    *string
			to   **rules.Duration
		}{{"backoff.initial", b.Initial, &c.Backoff.Initial}, {"backoff.max", b.Max, &c.Backoff.Max}} {
			if f.v == nil {
				continue
			}
			d, err := time.ParseDuration(*f.v)
			if err != nil || d <= 0 {
				return c, fmt.Errorf("%s: Invalid value: %q: must be a positive Go duration such as \"60s\"", f.name, clip(*f.v))
			}
			rd := rules.Duration(d)
			*f.to = &rd
		}
	}
	if e := a.Escalation; e != nil {
		c.Escalation = &rules.Escalation{Steps: e.Steps}
		if e.Window != nil {
			d, err := time.ParseDuration(*e.Window)
			if err != nil {
				return c, fmt.Errorf("escalation.window: Invalid value: %q: must be a Go duration such as \"1h\"", clip(*e.Window))
			}
			w := rules.Duration(d)
			c.Escalation.Window = &w
		}
	}
	if b := a.RestartBudget; b != nil {
		c.RestartBudget = &rules.RestartBudget{MaxRestarts: b.MaxRestarts}
		if b.Window != nil {
			d, err := time.ParseDuration(*b.Window)
			if err != nil {
				return c, fmt.Errorf("restartBudget.window: Invalid value: %q: must be a Go duration such as \"10m\"", clip(*b.Window))
			}
			w := rules.Duration(d)
			c.RestartBudget.Window = &w
		}
	}
	return c, nil
}

// annShape is what a node of the annotation must be.
type annShape int

// annFields are the keys of each mapping shape and the shape of their
// values: the fields of rules.Container, Rule and ExitCodes.
var annFields = map[annShape]map[string]annShape{
	annContainer: {"restartPolicy": annScalar, "restartPolicyRules": annRules,
		"restartBudget": annBudget, "handOverExitCodes": annValues, "preRestartCheck": annCheck, "progress": annProgress,
		"watchdog": annWatchdog, "escalation": annEscalation, "backoff": annBackoff},
	annBackoff:    {"initial": annScalar, "max": annScalar},
	annBudget:     {"maxRestarts": annScalar, "window": annScalar},
	annCheck:      {"command": annArgs, "timeoutSeconds": annScalar},
	annProgress:   {"file": annScalar, "maxStalledRestarts": annScalar},
	annEscalation: {"window": annScalar, "steps": annSteps},
	annStep:       {"action": annScalar, "restarts": annScalar},
	annWatchdog: {"heartbeatFile": annScalar, "outputPattern": annScalar, "firstHeartbeatSeconds": annScalar,
		"stallSeconds": annScalar, "exitCode": annScalar, "gracePeriodSeconds": annScalar},
	annRule:      {"action": annScalar, "exitCodes": annExitCodes},
	annExitCodes: {"operator": annScalar, "values": annValues},
}

func isNull(n *textyaml.Node) bool {
	return n.Kind == textyaml.ScalarNode && n.ShortTag() == "!!null"
}

// checkAnnotation checks n against shape in time linear in its size. path
// names the node in errors; every value quoted from the document is
// clipped, so an error is one short line.
func checkAnnotation(n *textyaml.Node, shape annShape, path string) error {
	if n.Kind == textyaml.AliasNode {
		return fmt.Errorf("line %d: %s: aliases are not supported", n.Line, cmp.Or(path, "the document"))
	}
	if isNull(n) {
		return nil // the decoder leaves the zero value
	}
	want := func(what string) error {
		if path == "" {
			return fmt.Errorf("line %d: must be a map from container name to {restartPolicy, restartPolicyRules}", n.Line)
		}
		return fmt.Errorf("line %d: %s: must be %s", n.Line, path, what)
	}
	switch shape {
	case annScalar:
		if n.Kind != textyaml.ScalarNode {
			return want("a string")
		}
	case annRules, annValues, annArgs, annSteps:
		if n.Kind != textyaml.SequenceNode {
			return want("a list")
		}
		max, item := rules.MaxRules, annRule
		switch shape {
		case annValues:
			max, item = rules.MaxValuesPerRule, annScalar
		case annArgs:
			max, item = rules.MaxProbeCommandArgs, annScalar
		case annSteps:
			max, item = rules.MaxEscalationSteps, annStep
		}
		if len(n.Content) > max {
			return fmt.Errorf("line %d: %s: Too many: %d: must have at most %d items", n.Line, path, len(n.Content), max)
		}
		for i, c := range n.Content {
			if err := checkAnnotation(c, item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	default:
		if n.Kind != textyaml.MappingNode {
			return want("a mapping")
		}
		fields := annFields[shape]
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != textyaml.ScalarNode {
				return fmt.Errorf("line %d: %s: keys must be strings", k.Line, cmp.Or(path, "container names"))
			}
			if line, dup := seen[k.Value]; dup {
				return fmt.Errorf("line %d: mapping key %q already defined at line %d", k.Line, clip(k.Value), line)
			}
			seen[k.Value] = k.Line
			child := annContainer
			if shape == annContainers {
				if len(k.Value) > maxContainerName {
					return fmt.Errorf("line %d: container name %q: must be no more than %d bytes", k.Line, clip(k.Value), maxContainerName)
				}
			} else {
				var ok bool
				if child, ok = fields[k.Value]; !ok {
					return fmt.Errorf("line %d: unknown field %q", k.Line, clip(k.Value))
				}
			}
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if err := checkAnnotation(n.Content[i+1], child, p); err != nil {
				return err
			}
		}
	}
	return nil
}
