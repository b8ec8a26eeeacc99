package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Config is the supervisor's configuration document. The container fields
// sit at the top level under their core/v1 names so that a user can paste
// them from a pod spec.
type Config struct {
	Container `yaml:",inline"`
	// PodRestartPolicy is the pod's spec.restartPolicy; empty means Always,
	// as in Kubernetes.
	PodRestartPolicy RestartPolicy `json:"podRestartPolicy,omitempty" yaml:"podRestartPolicy,omitempty"`
	// InitContainer marks an init container that is not a sidecar: its
	// exit 0 means "initialized" and is never restarted (see PlanInit).
	InitContainer bool    `json:"initContainer,omitempty" yaml:"initContainer,omitempty"`
	Backoff       Backoff `json:"backoff,omitzero" yaml:"backoff,omitempty"`
	// Probes are the container's probes, which the supervisor answers for
	// (see Probes).
	Probes *Probes `json:"probes,omitempty" yaml:"probes,omitempty"`
	// Limits say when an exit the rules would restart in place is handed
	// to the kubelet instead (limits.go).
	Limits `yaml:",inline"`
}

// Backoff configures the delay between in-place restarts. A nil field takes
// the kubelet's CrashLoopBackOff default.
type Backoff struct {
	Initial    *Duration `json:"initial,omitempty" yaml:"initial,omitempty"`
	Max        *Duration `json:"max,omitempty" yaml:"max,omitempty"`
	ResetAfter *Duration `json:"resetAfter,omitempty" yaml:"resetAfter,omitempty"`
}

// The kubelet's CrashLoopBackOff: 10s doubling to 300s, forgotten after the
// container has run for 10 minutes.
const (
	DefaultBackoffInitial    = 10 * time.Second
	DefaultBackoffMax        = 300 * time.Second
	DefaultBackoffResetAfter = 10 * time.Minute
)

// Duration is a time.Duration written as a Go duration string ("10s").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"10s\"")
	}
	return d.set(s)
}

func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a duration string such as \"10s\"")
	}
	return d.set(n.Value)
}

func (d *Duration) set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a Go duration such as \"10s\"", s)
	}
	*d = Duration(v)
	return nil
}

func (b Backoff) get(d *Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return time.Duration(*d)
}

// InitialDelay is the delay before the second restart; the first is immediate.
func (b Backoff) InitialDelay() time.Duration { return b.get(b.Initial, DefaultBackoffInitial) }

// MaxDelay caps the doubling.
func (b Backoff) MaxDelay() time.Duration { return b.get(b.Max, DefaultBackoffMax) }

// ResetAfterDuration is how long a run must last for the backoff to start
// over.
func (b Backoff) ResetAfterDuration() time.Duration {
	return b.get(b.ResetAfter, DefaultBackoffResetAfter)
}

// Delay returns the wait before restart number n (0 for the first restart
// after a reset): 0, then initial, doubling, capped at max.
func (b Backoff) Delay(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d, max := b.InitialDelay(), b.MaxDelay()
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// configSchema lists every key the document may hold, by path, with the
// kind of value it takes, so that a misspelt key or a value of the wrong
// type is an error that names the field instead of a silently ignored rule.
var configSchema = map[string]map[string]valueKind{
	"": {"restartPolicy": kindString, "restartPolicyRules": kindList,
		"podRestartPolicy": kindString, "initContainer": kindBool, "backoff": kindMap, "probes": kindMap},
	"probes":                         {"liveness": kindMap, "startup": kindMap, "readiness": kindMap},
	"backoff":                        {"initial": kindDuration, "max": kindDuration, "resetAfter": kindDuration},
	"restartPolicyRules[]":           {"action": kindString, "exitCodes": kindMap},
	"restartPolicyRules[].exitCodes": {"operator": kindString, "values": kindInt32List},
}

func init() {
	for _, p := range []string{"probes.liveness", "probes.startup", "probes.readiness"} {
		configSchema[p] = map[string]valueKind{"exec": kindMap, "httpGet": kindMap, "tcpSocket": kindMap, "grpc": kindMap,
			"initialDelaySeconds": kindInt32, "timeoutSeconds": kindInt32, "periodSeconds": kindInt32,
			"successThreshold": kindInt32, "failureThreshold": kindInt32, "terminationGracePeriodSeconds": kindInt64}
		configSchema[p+".exec"] = map[string]valueKind{"command": kindStringList}
		configSchema[p+".httpGet"] = map[string]valueKind{"path": kindString, "port": kindInt32, "host": kindString,
			"scheme": kindString, "httpHeaders": kindHeaderList}
		configSchema[p+".httpGet.httpHeaders[]"] = map[string]valueKind{"name": kindString, "value": kindString}
		configSchema[p+".tcpSocket"] = map[string]valueKind{"port": kindInt32, "host": kindString}
		configSchema[p+".grpc"] = map[string]valueKind{"port": kindInt32, "service": kindString}
	}
}

type valueKind int

const (
	kindString valueKind = iota
	kindMap
	kindList
	kindDuration
	kindInt32List
	kindBool
	kindInt32
	kindInt64
	kindStringList
	kindHeaderList
)

// checkValue checks that n is a value of kind at path (schema is its path
// in configSchema, without list indices), before anything is decoded.
func checkValue(n *yaml.Node, kind valueKind, schema, path string, ck checks) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	switch kind {
	case kindStringList, kindHeaderList, kindInt32List, kindList:
		return checkList(n, kind, schema, path, ck)
	case kindMap:
		return checkMapping(n, schema, path, ck)
	}
	return checkScalar(n, kind, path)
}

// invalidValue is the error for a value of the wrong kind at path.
func invalidValue(n *yaml.Node, path, want string) error {
	if n.Kind != yaml.ScalarNode {
		v := map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list", yaml.AliasNode: "an alias"}[n.Kind]
		return fmt.Errorf("config: %s: Invalid value: %s (line %d): %s", path, v, n.Line, want)
	}
	return fmt.Errorf("config: %s: Invalid value: %q (line %d): %s", path, clip(n.Value), n.Line, want)
}

// checkScalar checks a string, duration, bool or integer.
func checkScalar(n *yaml.Node, kind valueKind, path string) error {
	switch kind {
	case kindString:
		if n.Kind != yaml.ScalarNode {
			return invalidValue(n, path, "must be a string")
		}
	case kindDuration:
		if n.Kind != yaml.ScalarNode {
			return invalidValue(n, path, "must be a Go duration such as \"10s\"")
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			return invalidValue(n, path, "must be a Go duration such as \"10s\"")
		}
	case kindBool:
		if n.Kind != yaml.ScalarNode || (n.Value != "true" && n.Value != "false") {
			return invalidValue(n, path, "must be true or false")
		}
	case kindInt32, kindInt64:
		bits := 32
		if kind == kindInt64 {
			bits = 64
		}
		if n.Kind != yaml.ScalarNode {
			return invalidValue(n, path, fmt.Sprintf("must be a %d-bit integer", bits))
		}
		if _, err := strconv.ParseInt(n.Value, 10, bits); err != nil {
			return invalidValue(n, path, fmt.Sprintf("must be a %d-bit integer", bits))
		}
	}
	return nil
}

// checkList checks a list and each of its items, after bounding its
// length.
func checkList(n *yaml.Node, kind valueKind, schema, path string, ck checks) error {
	switch kind {
	case kindStringList:
		if n.Kind != yaml.SequenceNode {
			return invalidValue(n, path, "must be a list of strings")
		}
		if len(n.Content) > MaxProbeCommandArgs {
			return fmt.Errorf("config: %s: Too many: %d: must have at most %d items", path, len(n.Content), MaxProbeCommandArgs)
		}
		for i, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return invalidValue(item, fmt.Sprintf("%s[%d]", path, i), "must be a string")
			}
		}
	case kindHeaderList:
		if n.Kind != yaml.SequenceNode {
			return invalidValue(n, path, "must be a list")
		}
		if len(n.Content) > MaxProbeHeaders {
			return fmt.Errorf("config: %s: Too many: %d: must have at most %d items", path, len(n.Content), MaxProbeHeaders)
		}
		for i, item := range n.Content {
			if err := checkValue(item, kindMap, schema+"[]", fmt.Sprintf("%s[%d]", path, i), ck); err != nil {
				return err
			}
		}
	case kindInt32List:
		if n.Kind != yaml.SequenceNode {
			return invalidValue(n, path, "must be a list of exit codes")
		}
		if len(n.Content) > MaxValuesPerRule {
			return fmt.Errorf("config: %v", tooMany(ck, path, len(n.Content), MaxValuesPerRule))
		}
		for i, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return invalidValue(item, fmt.Sprintf("%s[%d]", path, i), "must be a 32-bit integer")
			}
			if _, err := strconv.ParseInt(item.Value, 0, 32); err != nil {
				return invalidValue(item, fmt.Sprintf("%s[%d]", path, i), "must be a 32-bit integer")
			}
		}
	case kindList:
		if n.Kind != yaml.SequenceNode {
			return invalidValue(n, path, "must be a list")
		}
		// Bounded here, before anything is decoded, so that a list of
		// thousands of invalid rules cannot make an error line of
		// thousands of messages.
		if len(n.Content) > MaxRules {
			return fmt.Errorf("config: %v", tooMany(ck, path, len(n.Content), MaxRules))
		}
		for i, item := range n.Content {
			if err := checkValue(item, kindMap, schema+"[]", fmt.Sprintf("%s[%d]", path, i), ck); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkMapping checks a mapping against the fields configSchema gives for
// schema: no unknown or repeated key, each value of its field's kind.
func checkMapping(n *yaml.Node, schema, path string, ck checks) error {
	if n.Kind != yaml.MappingNode {
		return invalidValue(n, path, "must be a mapping")
	}
	fields := configSchema[schema]
	// yaml.v3 finds duplicate keys by comparing every pair and
	// records one message per pair: thousands of repeated keys cost
	// seconds and gigabytes. Rejecting them here, in one pass, leaves
	// the decoder at most one key per schema field.
	seen := make(map[string]int, len(fields))
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn := n.Content[i]
		k := kn.Value
		child, ok := fields[k]
		if !ok || kn.Kind != yaml.ScalarNode {
			known := make([]string, 0, len(fields))
			for f := range fields {
				known = append(known, f)
			}
			sort.Strings(known)
			return fmt.Errorf("config: %s: unknown field (line %d); known fields: %s",
				join(path, clip(k)), kn.Line, strings.Join(known, ", "))
		}
		if line, dup := seen[k]; dup {
			return fmt.Errorf("config: %s: Duplicate value (line %d): already set at line %d", join(path, k), kn.Line, line)
		}
		seen[k] = kn.Line
		if err := checkValue(n.Content[i+1], child, join(schema, k), join(path, k), ck); err != nil {
			return err
		}
	}
	return nil
}

// MaxConfigSize bounds a configuration document. A real one is well under
// 4 KiB (20 rules of 255 exit codes each, the most Validate allows, fit in
// about 25 KiB of flow YAML); the cap keeps the YAML parser's time and
// memory small whatever a file, a ConfigMap or an annotation holds.
const MaxConfigSize = 64 << 10

// maxErrorLen bounds an error line: errors go to logs, to the termination
// message and to API responses, and must never echo a document back.
const maxErrorLen = 1024

// Parse reads a configuration document (YAML or JSON), rejects unknown keys
// and validates it like the newest release's API server. Every error is one
// line of at most 1 KiB that names the field. Time and memory are bounded: a
// document above MaxConfigSize is refused unread, and duplicate keys are
// refused before the decoder, whose own check of them is quadratic, sees
// them.
func Parse(data []byte) (Config, error) { return ParseFor(data, NewestKube) }

// ParseFor is Parse with the restart fields validated like the API server of
// release v.
func ParseFor(data []byte, v KubeVersion) (Config, error) {
	cfg, err := parse(data, v)
	if err != nil && len(err.Error()) > maxErrorLen {
		err = fmt.Errorf("%s", clipLen(err.Error(), maxErrorLen))
	}
	return cfg, err
}

func parse(data []byte, v KubeVersion) (Config, error) {
	var cfg Config
	if len(data) > MaxConfigSize {
		return cfg, fmt.Errorf("config: %d bytes: larger than %d bytes", len(data), MaxConfigSize)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err.Error() == "EOF" {
			return cfg, fmt.Errorf("config is empty")
		}
		return cfg, fmt.Errorf("config: %s", oneLine(err))
	}
	var extra yaml.Node
	if dec.Decode(&extra) == nil {
		return cfg, fmt.Errorf("config: holds more than one YAML document")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return cfg, fmt.Errorf("config is empty")
	}
	if root.Kind != yaml.MappingNode {
		return cfg, fmt.Errorf("config: must be a mapping with the keys %s", "restartPolicy, restartPolicyRules, podRestartPolicy, initContainer, backoff, probes, restartBudget, handOverExitCodes, preRestartCheck, progress, watchdog, escalation")
	}
	if err := checkValue(root, kindMap, "", "", v.checks()); err != nil {
		return cfg, err
	}
	if err := root.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("config: %s", oneLine(err))
	}
	return cfg, cfg.ValidateFor(v)
}

// Validate checks the whole document like the newest release.
func (c Config) Validate() error { return c.ValidateFor(NewestKube) }

// ValidateFor checks the whole document, the container fields as a regular
// container's in release v.
func (c Config) ValidateFor(v KubeVersion) error {
	errs := v.ValidateCarried(c.Container, "")
	if c.InitContainer {
		errs = v.ValidateInit(c.Container, "")
	}
	if c.PodRestartPolicy != "" {
		errs = append(errs, ValidatePodPolicy(c.PodRestartPolicy, "podRestartPolicy")...)
	}
	for _, f := range []struct {
		name string
		d    *Duration
	}{{"initial", c.Backoff.Initial}, {"max", c.Backoff.Max}, {"resetAfter", c.Backoff.ResetAfter}} {
		if f.d != nil && *f.d < 0 {
			errs = append(errs, &FieldError{"backoff." + f.name, fmt.Sprintf("Invalid value: %q: must not be negative", f.d.String())})
		}
	}
	errs = append(errs, c.Probes.validate("probes")...)
	errs = append(errs, c.Limits.validate()...)
	if c.InitContainer && c.Escalation != nil {
		errs = append(errs, &FieldError{"escalation", "Forbidden: may not be set for init containers without restartPolicy=Always"})
	}
	if c.Probes != nil && c.InitContainer && (c.Probes.Liveness != nil || c.Probes.Startup != nil || c.Probes.Readiness != nil) {
		errs = append(errs, &FieldError{"probes", "Forbidden: may not be set for init containers without restartPolicy=Always"})
	}
	return errs.Err()
}

// Plan decides an exit of the container this document describes, an init
// container's (PlanInit) or any other's (Plan).
func (c Config) Plan(exitCode int32) (Decision, Handling) { return c.PlanExit(exitCode, false) }

// PlanExit is Plan for an exit that the container runtime reports with
// reason OOMKilled when oomKilled is set. An init container in that state
// has failed whatever its exit code (isInitContainerFailed,
// pkg/kubelet/kuberuntime/helpers.go:167-182, v1.37.2): the kubelet then
// asks the restart decision for its exit code, 0 included, instead of
// taking exit 0 as initialized.
func (c Config) PlanExit(exitCode int32, oomKilled bool) (Decision, Handling) {
	if c.InitContainer && !oomKilled {
		return PlanInit(c.Container, c.Pod(), exitCode)
	}
	return Plan(c.Container, c.Pod(), exitCode)
}

// Pod returns the effective pod restart policy.
func (c Config) Pod() RestartPolicy {
	if c.PodRestartPolicy == "" {
		return Always
	}
	return c.PodRestartPolicy
}

// Marshal renders the document as compact JSON, the form the injector puts
// into RESTART_SUPERVISOR_CONFIG.
func (c Config) Marshal() ([]byte, error) { return json.Marshal(c) }

func oneLine(err error) string {
	return clipLen(strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "), maxErrorLen)
}

// clip shortens a value from the document for an error message.
//
// A key that is not plain printable text (a CR, a newline, a control
// character) is quoted Go-style, so that an error naming it stays one line.
func clip(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return clipLen(strconv.Quote(s), 64)
		}
	}
	return clipLen(s, 64)
}

// clipLen cuts s to at most max bytes on a rune boundary, marking the cut.
func clipLen(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const mark = "…"
	cut := max - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
