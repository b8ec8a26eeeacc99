// Package compose rewrites a Docker Compose file whose services carry
// restart rules so that those services run under restart-supervisor, as the
// injector does for a pod: `restart-injector compose`.
//
// The rules travel in an `x-restart-rules` extension of each service, the
// supervisor's configuration document (restartPolicy, restartPolicyRules,
// backoff, ...). Compose ignores `x-` keys, so the input stays a runnable
// Compose file. The output adds a one-shot service that installs the
// supervisor binary into a named volume, and points every ruled service at
// it: the supervisor as entrypoint, the service's own command after `--`,
// the rules and the pod's names in the environment, and a state volume
// shared by all wrapped services, so that RestartAllContainers across
// services behaves as it does across a pod's containers.
//
// Edits are made on the yaml.v3 node tree, so key order, comments and
// styles of everything not edited survive. Generate does no I/O but the
// image lookup it is given.
package compose

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	textyaml "go.yaml.in/yaml/v3"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/dockerrun"
	"github.com/restart-supervisor/restart-supervisor/internal/yamlbound"
	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
	"github.com/restart-supervisor/restart-supervisor/internal/yamlstyle"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// Names the generated file adds. The install service and the volumes are
// contract.InstallContainer, contract.BinVolume and contract.StateVolume, the
// names of the same objects in a pod.
const (
	// RulesKey is the service extension that carries the rules.
	RulesKey = "x-restart-rules"
	// MaxInputSize caps the Compose file read.
	MaxInputSize = 1 << 20
	// maxServices bounds the services of one file.
	maxServices = 1000
)

// ErrNoSuchImage is wrapped by Inspect when the local engine lacks an image.
var ErrNoSuchImage = dockerrun.ErrNoSuchImage

// Options configure Generate.
type Options struct {
	// SupervisorImage runs the install service.
	SupervisorImage string
	// Inspect reads an image's ENTRYPOINT, CMD and STOPSIGNAL from the
	// local engine; an image the engine lacks is an error wrapping
	// ErrNoSuchImage.
	Inspect func(ctx context.Context, image string) (dockerrun.ImageConfig, error)
	// Warn is told of what does not stop the generation; nil discards it.
	Warn func(msg string)
}

// Generate returns the Compose file data rewritten as the package
// documentation says. Errors are one line and name the service and field.
func Generate(ctx context.Context, data []byte, opts Options) ([]byte, error) {
	if len(data) > MaxInputSize {
		return nil, fmt.Errorf("compose file: %d bytes: larger than %d bytes", len(data), MaxInputSize)
	}
	if opts.SupervisorImage == "" {
		return nil, errors.New("supervisor image: must be specified")
	}
	var doc textyaml.Node
	dec := textyaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("compose file: %s", oneLine(err))
	}
	var extra textyaml.Node
	if dec.Decode(&extra) == nil {
		return nil, errors.New("compose file: holds more than one YAML document")
	}
	// Before any service is decoded into values: yaml.v3's check of
	// repeated keys, and aliases, cost far more than the file's size.
	if err := yamlbound.Check(&doc, yamlbound.Default); err != nil {
		return nil, fmt.Errorf("compose file: %v", err)
	}
	if doc.Kind != textyaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != textyaml.MappingNode {
		return nil, errors.New("compose file: must be a mapping with a services key")
	}
	root := doc.Content[0]
	servicesNode := yamledit.Member(root, "services")
	if servicesNode == nil || servicesNode.Kind != textyaml.MappingNode {
		return nil, errors.New("services: must be a mapping of services (Compose file format 2 or later)")
	}
	if len(servicesNode.Content)/2 > maxServices {
		return nil, fmt.Errorf("services: more than %d services", maxServices)
	}

	svcs, err := readServices(servicesNode)
	if err != nil {
		return nil, err
	}
	podWide := false
	ruled := 0
	for _, s := range svcs {
		if s.cfg != nil {
			ruled++
			for _, r := range s.cfg.RestartPolicyRules {
				if r.Action == rules.ActionRestartAllContainers {
					podWide = true
				}
			}
		}
	}
	if ruled == 0 {
		return nil, fmt.Errorf("services: no service carries %s; nothing to do", RulesKey)
	}
	if yamledit.Member(servicesNode, contract.InstallContainer) != nil {
		return nil, fmt.Errorf("services.%s: already present (the file was generated already?)", contract.InstallContainer)
	}
	var members []contract.PodMember
	if podWide {
		oneShots := completedTargets(svcs)
		for _, s := range svcs {
			// A service others wait on with service_completed_successfully
			// plays an init container's part: it must be able to end, so it
			// is no member (a member that ends stays up while the others
			// run, for a pod restart to restart it, as in a pod).
			if !oneShots[s.name] {
				members = append(members, contract.PodMember{Name: s.name, Kind: contract.MemberRegular})
			}
		}
	}
	if err := checkMembers(members); err != nil {
		return nil, err
	}
	for _, s := range svcs {
		if s.cfg == nil && !podWide {
			continue
		}
		if err := wrap(ctx, s, members, opts); err != nil {
			return nil, fmt.Errorf("service %s: %v", shown(s.name), err)
		}
	}

	// The install service goes first, so that a reader meets it before
	// the services that depend on it.
	install := mapping(
		"image", str(opts.SupervisorImage),
		// A new volume belongs to root; the supervisor image runs as 65532.
		"user", str("0"),
		"command", strSeq([]string{"install", contract.BinDir}),
		"volumes", seq(str(contract.BinVolume+":"+contract.BinDir)),
	)
	servicesNode.Content = append([]*textyaml.Node{str(contract.InstallContainer), install}, servicesNode.Content...)

	volumes := yamledit.Member(root, "volumes")
	switch {
	case volumes == nil || (volumes.Kind == textyaml.ScalarNode && volumes.Tag == "!!null"):
		volumes = &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map"}
		setKey(root, "volumes", volumes)
	case volumes.Kind != textyaml.MappingNode:
		return nil, errors.New("volumes: must be a mapping")
	}
	for _, v := range []string{contract.BinVolume, contract.StateVolume} {
		if yamledit.Member(volumes, v) != nil {
			return nil, fmt.Errorf("volumes.%s: already present (the file was generated already?)", v)
		}
		volumes.Content = append(volumes.Content, str(v), &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map", Style: textyaml.FlowStyle})
	}

	plainMergeKeys(&doc)
	out, err := yamledit.Encode(&doc, yamlstyle.CompactSequences(data, false))
	if err != nil {
		return nil, fmt.Errorf("writing the compose file: %v", err)
	}
	return []byte(out), nil
}

// service is one entry of services: its node, to edit, and its decoded
// form, with merge keys (<<) resolved, to read.
type service struct {
	name string
	node *textyaml.Node
	eff  map[string]any
	cfg  *rules.Config
}

func readServices(servicesNode *textyaml.Node) ([]*service, error) {
	var out []*service
	for i := 0; i+1 < len(servicesNode.Content); i += 2 {
		name := servicesNode.Content[i].Value
		node := servicesNode.Content[i+1]
		if err := podstateName(name); err != nil {
			return nil, fmt.Errorf("service %s: %v", shown(name), err)
		}
		if node.Kind == textyaml.AliasNode {
			// Edits must not reach the node other services alias: this
			// service gets its own copy.
			node = yamledit.DeepCopy(node.Alias)
			servicesNode.Content[i+1] = node
		}
		if node.Kind != textyaml.MappingNode {
			return nil, fmt.Errorf("service %s: must be a mapping", name)
		}
		s := &service{name: name, node: node}
		if err := node.Decode(&s.eff); err != nil {
			return nil, fmt.Errorf("service %s: %s", shown(name), oneLine(err))
		}
		if rn := yamledit.Member(node, RulesKey); rn != nil || s.eff[RulesKey] != nil {
			cfg, err := readRules(s)
			if err != nil {
				return nil, fmt.Errorf("service %s: %s: %v", shown(name), RulesKey, err)
			}
			s.cfg = &cfg
		}
		out = append(out, s)
	}
	return out, nil
}

// readRules parses the service's x-restart-rules as the supervisor parses
// its config, and fills in podRestartPolicy from Compose's restart:.
func readRules(s *service) (rules.Config, error) {
	text, err := textyaml.Marshal(s.eff[RulesKey])
	if err != nil {
		return rules.Config{}, err
	}
	cfg, err := rules.Parse(text)
	if err != nil {
		return cfg, errors.New(strings.TrimPrefix(oneLine(err), "config: "))
	}
	pod, err := podPolicy(s.eff)
	if err != nil {
		return cfg, err
	}
	if cfg.PodRestartPolicy != "" && cfg.PodRestartPolicy != pod {
		return cfg, fmt.Errorf("podRestartPolicy: %s, but the service's restart: makes it %s; leave podRestartPolicy out (it follows restart:)", cfg.PodRestartPolicy, pod)
	}
	cfg.PodRestartPolicy = pod
	return cfg, nil
}

// podPolicy maps Compose's restart: to the pod restartPolicy the
// supervisor hands exits over to: the engine restarts a container as a
// kubelet restarts a pod's.
func podPolicy(eff map[string]any) (rules.RestartPolicy, error) {
	v, ok := eff["restart"]
	if !ok || v == nil {
		return rules.Never, nil
	}
	s, isStr := v.(string)
	if b, isBool := v.(bool); isBool && !b {
		// restart: no, unquoted, is YAML's false.
		s, isStr = "no", true
	}
	switch {
	case !isStr:
	case s == "no" || s == "":
		return rules.Never, nil
	case s == "always" || s == "unless-stopped":
		return rules.Always, nil
	case s == "on-failure" || strings.HasPrefix(s, "on-failure:"):
		return rules.OnFailure, nil
	}
	return "", fmt.Errorf("restart: unsupported value %v: supported values: no, on-failure[:N], always, unless-stopped", v)
}

func podstateName(name string) error {
	if name == "" || strings.HasPrefix(name, ".") || strings.ContainsAny(name, "/,:\x00") || len(name) > 253 {
		return errors.New("name must not be empty, start with '.', contain '/', ',' or ':', or exceed 253 bytes")
	}
	return nil
}

// wrap edits one service to run under the supervisor.
func wrap(ctx context.Context, s *service, members []contract.PodMember, opts Options) error {
	n := s.node
	if n.Anchor != "" {
		// The edits would reach every service that aliases it.
		return fmt.Errorf("is an anchor (&%s) other services may alias; give the shared part its own x- extension and merge it", n.Anchor)
	}
	ep, hasEP, err := argvField(s.eff, "entrypoint")
	if err != nil {
		return err
	}
	cmd, hasCmd, err := argvField(s.eff, "command")
	if err != nil {
		return err
	}
	if hasEP && len(ep) > 0 && ep[0] == contract.SupervisorPath {
		return fmt.Errorf("entrypoint: already runs %s", contract.SupervisorPath)
	}
	stopSignal, _ := s.eff["stop_signal"].(string)
	image, _ := s.eff["image"].(string)

	// The image config is needed for the command when the service does not
	// give its entrypoint, and for the STOPSIGNAL when it gives no
	// stop_signal.
	var ic dockerrun.ImageConfig
	if !hasEP || stopSignal == "" {
		switch {
		case image == "" && !hasEP:
			return errors.New("image: not set (a build-only service); set image: to the name the build is tagged with, build it, and generate again, or give the service an entrypoint")
		case image == "":
		default:
			ic, err = opts.Inspect(ctx, image)
			switch {
			case errors.Is(err, ErrNoSuchImage) && !hasEP:
				return fmt.Errorf("image %s: not in the local engine; pull or build it first (docker-compose pull / build), or give the service an entrypoint and command", shown(image))
			case errors.Is(err, ErrNoSuchImage):
				if opts.Warn != nil {
					opts.Warn(fmt.Sprintf("service %s: image %s is not in the local engine, so its STOPSIGNAL is unknown; set stop_signal if the image has one", shown(s.name), shown(image)))
				}
			case err != nil:
				return err
			}
		}
	}
	// What comes from the image is written into the file, where Compose
	// would interpolate a '$'.
	if !hasEP {
		ep = escapeAll(ic.Entrypoint)
		if !hasCmd {
			cmd = escapeAll(ic.Cmd)
		}
	}
	// Compose, like docker run --entrypoint, drops the image's CMD once the
	// service sets entrypoint: the resolved command goes into command:.
	if len(ep)+len(cmd) == 0 {
		return errors.New("command: the service and its image give neither entrypoint nor command")
	}
	if stopSignal == "" {
		stopSignal = ic.StopSignal
	}

	if err := checkMounts(s.eff); err != nil {
		return err
	}
	env, err := envOf(s.eff)
	if err != nil {
		return err
	}

	cfg := rules.Config{PodRestartPolicy: rules.Never}
	if s.cfg != nil {
		cfg = *s.cfg
	} else if cfg.PodRestartPolicy, err = podPolicy(s.eff); err != nil {
		return err
	}
	doc, err := cfg.Marshal()
	if err != nil {
		return err
	}
	add := [][2]string{
		{contract.EnvConfig, string(doc)},
		{contract.EnvStateDir, contract.StateDir},
		{contract.EnvContainerName, s.name},
	}
	if members != nil {
		add = append(add, [2]string{contract.EnvPodMembers, contract.FormatPodMembers(members)})
	}
	if sig, ok := contract.ExtraStopSignal(stopSignal); ok {
		add = append(add, [2]string{contract.EnvStopSignals, "SIGTERM,SIGINT," + sig})
	}
	for _, kv := range add {
		if _, set := env[kv[0]]; set {
			return fmt.Errorf("environment.%s: set by the service; the generator sets it", kv[0])
		}
	}

	yamledit.DeleteMember(n, RulesKey)
	setKey(n, "entrypoint", strSeq(append([]string{contract.SupervisorPath, "--"}, ep...)))
	// The service's own command stays as written (Compose splits a string
	// the same way under any entrypoint); the image's CMD is written out.
	if !hasCmd && len(cmd) > 0 {
		setKey(n, "command", strSeq(cmd))
	}
	addEnv(n, s.eff, add)
	addVolumes(n, s.eff, contract.BinVolume+":"+contract.BinDir+":ro", contract.StateVolume+":"+contract.StateDir)
	return addDependsOn(n, s.eff)
}

// argvField reads entrypoint or command: a list, or a string split as
// Compose splits it (shell words, no shell). Null means unset.
func argvField(eff map[string]any, key string) ([]string, bool, error) {
	v, ok := eff[key]
	if !ok || v == nil {
		return nil, false, nil
	}
	switch t := v.(type) {
	case string:
		argv, err := splitWords(t)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %v", key, err)
		}
		return argv, true, nil
	case []any:
		argv := make([]string, len(t))
		for i, e := range t {
			s, ok := scalarString(e)
			if !ok {
				return nil, false, fmt.Errorf("%s[%d]: must be a string", key, i)
			}
			argv[i] = s
		}
		return argv, true, nil
	}
	return nil, false, fmt.Errorf("%s: must be a string or a list of strings", key)
}

func scalarString(v any) (string, bool) {
	switch t := v.(type) {
	case string:
		return t, true
	case int, int64, uint64, float64, bool:
		return fmt.Sprint(t), true
	}
	return "", false
}

// checkMounts refuses a service that already mounts something where the
// supervisor's volumes go.
func checkMounts(eff map[string]any) error {
	list, ok := eff["volumes"].([]any)
	if eff["volumes"] != nil && !ok {
		return errors.New("volumes: must be a list")
	}
	for i, v := range list {
		var target string
		switch t := v.(type) {
		case string:
			parts := strings.Split(t, ":")
			target = parts[0]
			if len(parts) > 1 {
				target = parts[1]
			}
		case map[string]any:
			target, _ = t["target"].(string)
		default:
			return fmt.Errorf("volumes[%d]: must be a string or a mapping", i)
		}
		target = strings.TrimRight(target, "/")
		if target == contract.BinDir || target == contract.StateDir {
			return fmt.Errorf("volumes[%d]: mounts %s, where the supervisor's volume goes", i, target)
		}
	}
	return nil
}

// envOf returns the service's environment as a map; a name without a
// value maps to nil.
func envOf(eff map[string]any) (map[string]any, error) {
	out := map[string]any{}
	switch t := eff["environment"].(type) {
	case nil:
	case map[string]any:
		return t, nil
	case []any:
		for i, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("environment[%d]: must be a string NAME=VALUE", i)
			}
			k, v, hasV := strings.Cut(s, "=")
			if hasV {
				out[k] = v
			} else {
				out[k] = nil
			}
		}
	default:
		return nil, errors.New("environment: must be a mapping or a list")
	}
	return out, nil
}

// addEnv adds the variables to the service's own environment node, in its
// style; when the environment comes from a merge key or an alias, the
// service gets its own mapping with the merged entries and the new ones.
func addEnv(n *textyaml.Node, eff map[string]any, add [][2]string) {
	own := yamledit.Member(n, "environment")
	if own != nil && own.Kind == textyaml.SequenceNode && own.Anchor == "" {
		for _, kv := range add {
			own.Content = append(own.Content, str(escape(kv[0]+"="+kv[1])))
		}
		return
	}
	if own != nil && own.Kind == textyaml.MappingNode && own.Anchor == "" {
		for _, kv := range add {
			own.Content = append(own.Content, str(kv[0]), str(escape(kv[1])))
		}
		return
	}
	m := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map"}
	if eff["environment"] != nil {
		// The merged entries, already in Compose's syntax: copied as they are.
		src, _ := envOf(eff)
		for _, k := range sortedKeys(src) {
			if src[k] == nil {
				m.Content = append(m.Content, str(k), &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!null", Value: "null"})
			} else {
				sv, _ := scalarString(src[k])
				m.Content = append(m.Content, str(k), str(sv))
			}
		}
	}
	for _, kv := range add {
		m.Content = append(m.Content, str(kv[0]), str(escape(kv[1])))
	}
	setKey(n, "environment", m)
}

// addVolumes appends the mounts to the service's own volumes list, or
// gives it one holding the merged entries and the new ones.
func addVolumes(n *textyaml.Node, eff map[string]any, mounts ...string) {
	own := yamledit.Member(n, "volumes")
	if own == nil || own.Kind != textyaml.SequenceNode || own.Anchor != "" {
		own = &textyaml.Node{Kind: textyaml.SequenceNode, Tag: "!!seq"}
		if list, ok := eff["volumes"].([]any); ok {
			for _, v := range list {
				own.Content = append(own.Content, anyNode(v))
			}
		}
		setKey(n, "volumes", own)
	}
	for _, m := range mounts {
		own.Content = append(own.Content, str(m))
	}
}

// completedTargets returns the services some service waits on with the
// condition service_completed_successfully.
func completedTargets(svcs []*service) map[string]bool {
	out := map[string]bool{}
	for _, s := range svcs {
		deps, _ := s.eff["depends_on"].(map[string]any)
		for name, d := range deps {
			if m, ok := d.(map[string]any); ok && m["condition"] == "service_completed_successfully" {
				out[name] = true
			}
		}
	}
	return out
}

// addDependsOn makes the service wait for the install service to complete.
// A list of services becomes the mapping form, each with the condition
// the list form means (service_started).
func addDependsOn(n *textyaml.Node, eff map[string]any) error {
	own := yamledit.Member(n, "depends_on")
	cond := func(c string) *textyaml.Node { return mapping("condition", str(c)) }
	if own != nil && own.Kind == textyaml.MappingNode && own.Anchor == "" {
		own.Content = append(own.Content, str(contract.InstallContainer), cond("service_completed_successfully"))
		return nil
	}
	m := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map"}
	switch t := eff["depends_on"].(type) {
	case nil:
	case []any:
		for i, e := range t {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("depends_on[%d]: must be a service name", i)
			}
			m.Content = append(m.Content, str(s), cond("service_started"))
		}
	case map[string]any:
		for _, k := range sortedKeys(t) {
			m.Content = append(m.Content, str(k), anyNode(t[k]))
		}
	default:
		return errors.New("depends_on: must be a list or a mapping")
	}
	m.Content = append(m.Content, str(contract.InstallContainer), cond("service_completed_successfully"))
	setKey(n, "depends_on", m)
	return nil
}

// escape doubles '$', which Compose would otherwise interpolate, in values
// that come from the image or the generator rather than from the file.
func escape(s string) string { return strings.ReplaceAll(s, "$", "$$") }

func escapeAll(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = escape(a)
	}
	return out
}

// maxMembersOutput bounds what the member list adds to the file: Compose
// has no downward API, so every member's environment repeats the whole
// list, and n members cost n times the list.
const maxMembersOutput = 1 << 20

// checkMembers refuses a member list the supervisor would not read
// (contract.MaxPodMembers) or whose copies in every member would add more
// than maxMembersOutput bytes.
func checkMembers(members []contract.PodMember) error {
	if len(members) > contract.MaxPodMembers {
		return fmt.Errorf("services: %d services take part in pod restarts (RestartAllContainers), at most %d may", len(members), contract.MaxPodMembers)
	}
	size := 0
	for _, m := range members {
		size += len(m.Name) + len(m.Kind) + 2
	}
	if size*len(members) > maxMembersOutput {
		return fmt.Errorf("services: the %d services that take part in pod restarts (RestartAllContainers) would each carry %s of %d bytes, %d in all, more than %d",
			len(members), contract.EnvPodMembers, size, size*len(members), maxMembersOutput)
	}
	return nil
}
