// Package cluster brings up and tears down a real single-node Kubernetes
// cluster for the end-to-end conformance tests: Debian's containerd and runc,
// and etcd, kube-apiserver, kubelet and (optionally) kube-controller-manager
// built from source by hack/kube-binaries.sh. Everything it creates lives
// under one state directory, every process it starts is recorded there, and
// Down removes all of it (processes, mounts, kubepods cgroups, the sysctls
// the kubelet changes), so a cluster left up by hand is torn down the same way.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultDir is where the cluster keeps all of its state.
const DefaultDir = "/tmp/restart-supervisor-e2e"

// NodeName is the first node's name.
const NodeName = "restart-supervisor-e2e"

// SecondNodeName is the second node's name (Options.SecondNode), and
// secondCgroupRoot its kubelet's cgroup root: its pods' kubepods tree lives
// below it, apart from the first kubelet's, which would otherwise remove
// the other's pod cgroups as orphans.
const (
	SecondNodeName   = "restart-supervisor-e2e-2"
	secondCgroupRoot = "rse2e-node2"
)

// Options chooses what Up starts.
type Options struct {
	Dir    string // state directory (DefaultDir when empty)
	BinDir string // etcd, kube-apiserver, kubelet, kube-controller-manager
	// KubeletBinDir, when set, takes the kubelet from another release's
	// binaries: a node not yet upgraded under an upgraded control plane
	// (a kubelet may be up to three minor releases older than the API
	// server). Use it with DefaultGates: the gates are the kubelet's
	// release's otherwise.
	KubeletBinDir string
	// KubeletGates are set on the kubelet only, after (and over) the
	// cluster's: a node whose operator turned a feature off while the
	// control plane keeps it, as RestartAllContainersOnContainerExits=false
	// on a 1.37 kubelet, which then does not declare the feature in
	// status.declaredFeatures.
	KubeletGates []FeatureGate
	Repo         string // repository root, for building the local images
	// RestartRules turns the restart-rules feature gates of the release
	// on in the API server and the kubelet (native KEP-5307, and KEP-5532
	// from 1.35); false turns them off (see FeatureGates).
	RestartRules bool
	// DefaultGates sets none of the restart-rules gates, so the release's
	// defaults apply (RestartRules is then ignored): what a cluster of
	// that release runs unless its operator chose otherwise.
	DefaultGates bool
	// ControllerManager starts kube-controller-manager with only the job
	// and endpointslice controllers (pods carry spec.nodeName, so no
	// scheduler is needed).
	ControllerManager bool
	// GarbageCollector adds the garbage collector to the controller
	// manager: objects deleted in the foreground (a JobSet's Jobs when it
	// restarts) are gone only when it removes their finalizer.
	GarbageCollector bool
	// SupervisorImage builds the supervisor image from ./cmd/restart-supervisor
	// and imports it as SupervisorImage.
	SupervisorImage bool
	// JobSetDir, when set, installs JobSet from this directory
	// (hack/jobset.sh): its CRD, its controller on the host and its
	// webhooks.
	JobSetDir string
	// Kueue, when its Dir is set, installs Kueue (hack/kueue.sh) after
	// JobSet, with a queue for the jobs (startKueue).
	Kueue KueueOptions
	// Images are more docker-archive files to import into containerd
	// (BuildTrainingImage makes one).
	Images []string
	// SecondNode starts a second node, SecondNodeName, under the same
	// control plane: its own containerd (state under Dir/node2), its own
	// kubelet (other ports, root directory and cgroup root), on the same
	// host, so that a test spans two nodes with a node agent on each.
	SecondNode bool
	// Workloads runs what an operator's own Deployments need on this
	// node: kube-scheduler, and in the controller manager (started with
	// it) the deployment, replicaset, serviceaccount, nodelifecycle and
	// root-ca-cert-publisher controllers, with the API server's CA as
	// kube-root-ca.crt, so that a pod's in-cluster client trusts the API
	// server. The API server then routes calls to a Service's webhook to
	// one of its EndpointSlice addresses (--enable-aggregator-routing):
	// there is no kube-proxy to route its ClusterIP.
	Workloads bool
	// ContainerdDir, when set, runs the nodes on the containerd 2 of this
	// directory (hack/containerd.sh: containerd, its runc shim and ctr)
	// instead of Debian's 1.6: the first runtime here that mounts image
	// volumes (containerd 2.1).
	ContainerdDir string
	// Delivery is the webhook's --delivery (StartWebhook); empty is copy.
	Delivery string
	Log      io.Writer
}

// State is what a running cluster records in Dir/state.json.
type State struct {
	Dir          string `json:"dir"`
	Kubeconfig   string `json:"kubeconfig"`
	APIServer    string `json:"apiServer"`
	Token        string `json:"token"`
	NodeName     string `json:"nodeName"`
	NodeIP       string `json:"nodeIP"`
	RestartRules bool   `json:"restartRules"`
	// KubeVersion is the release of the kubelet, "v1.36.3".
	KubeVersion string `json:"kubeVersion"`
	// APIServerVersion is the release of kube-apiserver: KubeVersion but
	// under Options.KubeletBinDir.
	APIServerVersion string `json:"apiServerVersion"`
	Containerd       string `json:"containerdSocket"`
	// ContainerdDir is Options.ContainerdDir; empty: the containerd on PATH.
	ContainerdDir string `json:"containerdDir,omitempty"`
	// Delivery is Options.Delivery, copy when it was empty.
	Delivery string `json:"delivery"`
	// Second is the second node, when Options.SecondNode started one.
	Second *SecondNodeState `json:"second,omitempty"`
	// Processes in start order: name → pid.
	Processes []Proc `json:"processes"`
}

// SecondNodeState is what the second node records.
type SecondNodeState struct {
	NodeName    string `json:"nodeName"`
	Containerd  string `json:"containerdSocket"`
	KubeletRoot string `json:"kubeletRoot"`
}

// Proc is one process the harness started.
type Proc struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	Exe  string `json:"exe"`
}

// Cluster is a running cluster.
type Cluster struct {
	State
	Config *rest.Config
	Client kubernetes.Interface
	log    io.Writer
	exited map[string]chan struct{}
	// kubeletArgv is the kubelet's command line, for RestartKubelet.
	kubeletArgv []string
	// The restart-injector binary (InjectorBinary).
	injectorOnce sync.Once
	injectorBin  string
	injectorErr  error
}

func (c *Cluster) logf(format string, a ...any) {
	fmt.Fprintf(c.log, "[e2e-cluster] "+format+"\n", a...)
}

func (c *Cluster) path(p ...string) string { return filepath.Join(append([]string{c.Dir}, p...)...) }

// sysctls the kubelet sets on start (pkg/kubelet/cm setupNode); Down puts
// the saved values back.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// Up starts a cluster from nothing. A cluster left in opts.Dir is torn down
// first. On failure everything started so far is torn down again.
func Up(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("e2e cluster: must run as root (containerd, kubelet, mounts, cgroups)")
	}
	if _, err := os.Stat(opts.Dir); err == nil {
		if err := Down(opts.Dir, opts.Log); err != nil {
			return nil, fmt.Errorf("e2e cluster: tearing down the previous cluster in %s: %w", opts.Dir, err)
		}
	}
	if opts.KubeletBinDir == "" {
		opts.KubeletBinDir = opts.BinDir
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kubelet"} {
		dir := opts.BinDir
		if bin == "kubelet" {
			dir = opts.KubeletBinDir
		}
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return nil, fmt.Errorf("e2e cluster: %s missing in %q (run hack/kube-binaries.sh)", bin, dir)
		}
	}
	for _, tool := range []string{"containerd", "ctr", "runc"} {
		if opts.ContainerdDir != "" && tool != "runc" {
			if _, err := os.Stat(filepath.Join(opts.ContainerdDir, tool)); err != nil {
				return nil, fmt.Errorf("e2e cluster: %s missing in %q (run hack/containerd.sh)", tool, opts.ContainerdDir)
			}
			continue
		}
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("e2e cluster: %s not found (run test/e2e/setup.sh)", tool)
		}
	}
	if opts.Delivery == "" {
		opts.Delivery = "copy"
	}
	version, err := KubeVersion(opts.KubeletBinDir)
	if err != nil {
		return nil, err
	}
	apiVersion, err := binaryVersion(filepath.Join(opts.BinDir, "kube-apiserver"))
	if err != nil {
		return nil, err
	}
	c = &Cluster{State: State{Dir: opts.Dir, NodeName: NodeName, RestartRules: opts.RestartRules, KubeVersion: version,
		APIServerVersion: apiVersion, ContainerdDir: opts.ContainerdDir, Delivery: opts.Delivery},
		log: opts.Log, exited: map[string]chan struct{}{}}
	defer func() {
		if err != nil {
			c.logf("bring-up failed: %v; tearing down", err)
			_ = Down(opts.Dir, opts.Log)
			c = nil
		}
	}()
	start := time.Now()
	for _, d := range []string{"logs", "images", "pki", "etcd", "containerd", "cni/net.d", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return c, err
		}
	}
	if err := c.saveSysctls(); err != nil {
		return c, err
	}
	if c.NodeIP, err = nodeIP(); err != nil {
		return c, err
	}
	if err := c.writeState(); err != nil {
		return c, err
	}

	// Images are built while nothing runs yet; importing needs containerd.
	images := []string{}
	c.logf("building images")
	for _, build := range []func() (string, error){
		func() (string, error) { return buildPauseImage(opts.Repo, c.path("images")) },
		func() (string, error) { return buildBusyboxImage(c.path("images")) },
		func() (string, error) { return buildBusyboxQuitImage(c.path("images")) },
	} {
		p, err := build()
		if err != nil {
			return c, err
		}
		images = append(images, p)
	}
	if opts.SupervisorImage {
		p, err := buildSupervisorImage(opts.Repo, c.path("images"))
		if err != nil {
			return c, err
		}
		images = append(images, p)
	}

	images = append(images, opts.Images...)
	if err := c.startContainerd(ctx, images); err != nil {
		return c, err
	}
	if err := c.startControlPlane(ctx, opts); err != nil {
		return c, err
	}
	if err := c.startKubelet(ctx, opts); err != nil {
		return c, err
	}
	if opts.SecondNode {
		if err := c.startSecondNode(ctx, opts, images); err != nil {
			return c, fmt.Errorf("second node: %w", err)
		}
	}
	if opts.ControllerManager || opts.Workloads {
		if err := c.startControllerManager(ctx, opts); err != nil {
			return c, err
		}
	}
	if opts.Workloads {
		if err := c.startScheduler(ctx, opts); err != nil {
			return c, err
		}
	}
	if opts.JobSetDir != "" {
		if err := c.startJobSet(ctx, opts.JobSetDir); err != nil {
			return c, fmt.Errorf("jobset: %w", err)
		}
	}
	if opts.Kueue.Dir != "" {
		if err := c.startKueue(ctx, opts.Kueue); err != nil {
			return c, fmt.Errorf("kueue: %w", err)
		}
	}
	gates := GateFlag(opts.gates(version))
	if gates == "" {
		gates = "no restart-rules gates set"
		if opts.DefaultGates && RestartRulesNative(version) {
			gates += ": the release's defaults"
		}
	}
	if apiVersion != version {
		version = fmt.Sprintf("%s control plane, %s kubelet", apiVersion, version)
	}
	c.logf("cluster up in %s (Kubernetes %s, %s); KUBECONFIG=%s", time.Since(start).Round(100*time.Millisecond), version,
		gates, c.Kubeconfig)
	return c, nil
}

// KubeVersion is the release of the kubelet in binDir, as `kubelet
// --version` prints it ("v1.36.3").
func KubeVersion(binDir string) (string, error) {
	return binaryVersion(filepath.Join(binDir, "kubelet"))
}

// binaryVersion is what a Kubernetes server binary's --version says.
func binaryVersion(path string) (string, error) {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("e2e cluster: %s --version: %w", filepath.Base(path), err)
	}
	f := strings.Fields(string(out)) // "Kubernetes v1.36.3"
	if len(f) != 2 || Minor(f[1]) < 0 {
		return "", fmt.Errorf("e2e cluster: %s --version printed %q", filepath.Base(path), out)
	}
	return f[1], nil
}

// Minor is the minor release of a version "v1.N.M"; -1 when it is not one.
func Minor(version string) int {
	var major, minor, patch int
	if n, _ := fmt.Sscanf(version, "v%d.%d.%d", &major, &minor, &patch); n != 3 || major != 1 {
		return -1
	}
	return minor
}

// A FeatureGate is one gate and the value the cluster sets.
type FeatureGate struct {
	Name string
	On   bool
}

// FeatureGates are the gates a cluster of the given release sets on the API
// server and the kubelet: each gate of the restart-rules features the
// release has, all on or all off; none before 1.34, whose binaries refuse
// to start with a gate they do not know. pkg/features/kube_features.go:
//   - ContainerRestartRules: alpha 1.34, beta and on by default from 1.35.
//   - RestartAllContainersOnContainerExits: alpha 1.35, beta and on by
//     default from 1.36; it depends on ContainerRestartRules and
//     NodeDeclaredFeatures (alpha 1.35, beta 1.36), so off it must be when
//     ContainerRestartRules is off, and on it needs NodeDeclaredFeatures
//     on in 1.35. NodeDeclaredFeatures is otherwise left at its default.
func FeatureGates(version string, on bool) []FeatureGate {
	minor := Minor(version)
	if !RestartRulesNative(version) {
		return nil
	}
	gates := []FeatureGate{{"ContainerRestartRules", on}}
	if minor >= 35 {
		gates = append(gates, FeatureGate{"RestartAllContainersOnContainerExits", on})
		if on && minor == 35 {
			gates = append(gates, FeatureGate{"NodeDeclaredFeatures", true})
		}
	}
	return gates
}

// gates are the restart-rules gates the cluster sets: none under
// DefaultGates, else FeatureGates.
func (opts Options) gates(version string) []FeatureGate {
	if opts.DefaultGates {
		return nil
	}
	return FeatureGates(version, opts.RestartRules)
}

// kubeletGates are the gates the kubelet sets: the cluster's, with
// KubeletGates over them.
func (opts Options) kubeletGates(version string) []FeatureGate {
	gates := slices.Clone(opts.gates(version))
	for _, g := range opts.KubeletGates {
		if i := slices.IndexFunc(gates, func(h FeatureGate) bool { return h.Name == g.Name }); i >= 0 {
			gates[i] = g
		} else {
			gates = append(gates, g)
		}
	}
	return gates
}

// ParseGates reads "Name=false,Other=true" (the --feature-gates form).
func ParseGates(s string) ([]FeatureGate, error) {
	var gates []FeatureGate
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		on, err := strconv.ParseBool(val)
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("feature gate %q: want Name=true or Name=false", part)
		}
		gates = append(gates, FeatureGate{name, on})
	}
	return gates, nil
}

// RestartRulesDefault reports whether a release honours restartPolicyRules
// with its default gates: ContainerRestartRules is beta and on by default
// from 1.35 (pkg/features/kube_features.go, v1.35.4).
func RestartRulesDefault(version string) bool { return Minor(version) >= 35 }

// RestartAllContainersDefault reports whether a release honours the
// RestartAllContainers action with its default gates:
// RestartAllContainersOnContainerExits is alpha and off in 1.35, beta and
// on by default from 1.36 (pkg/features/kube_features.go, v1.36.3).
func RestartAllContainersDefault(version string) bool { return Minor(version) >= 36 }

// RestartRulesNative reports whether the release has the restart rules at
// all (KEP-5307, ContainerRestartRules: 1.34). An older API server does not
// know the restartPolicyRules field and drops it when it decodes a pod, so
// there the rules reach the webhook only in the restart-supervisor.dev/rules
// annotation, and a native run has nothing to run.
func RestartRulesNative(version string) bool { return Minor(version) >= 34 }

// RestartAllContainersNative reports whether a cluster of the release with
// its gates on (FeatureGates) honours RestartAllContainers itself.
func RestartAllContainersNative(version string) bool { return Minor(version) >= 35 }

// GateFlag is the value of --feature-gates for gates, "" for none.
func GateFlag(gates []FeatureGate) string {
	parts := make([]string, len(gates))
	for i, g := range gates {
		parts[i] = fmt.Sprintf("%s=%v", g.Name, g.On)
	}
	return strings.Join(parts, ",")
}

// gateArgs is the --feature-gates argument, none for no gates.
func gateArgs(gates []FeatureGate) []string {
	if len(gates) == 0 {
		return nil
	}
	return []string{"--feature-gates=" + GateFlag(gates)}
}

// gateYAML is the kubelet configuration's featureGates, "" for none.
func gateYAML(gates []FeatureGate) string {
	if len(gates) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("featureGates:\n")
	for _, g := range gates {
		fmt.Fprintf(&b, "  %s: %v\n", g.Name, g.On)
	}
	return b.String()
}

// Load attaches to a cluster started earlier (for example by hack/e2e-up.sh).
func Load(dir string) (*Cluster, error) {
	if dir == "" {
		dir = DefaultDir
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, fmt.Errorf("e2e cluster: no cluster in %s: %w", dir, err)
	}
	c := &Cluster{log: os.Stderr, exited: map[string]chan struct{}{}}
	if err := json.Unmarshal(b, &c.State); err != nil {
		return nil, fmt.Errorf("e2e cluster: %s/state.json: %w", dir, err)
	}
	return c, c.connect()
}

func (c *Cluster) writeState() error {
	b, _ := json.MarshalIndent(c.State, "", "  ")
	tmp := c.path("state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.path("state.json"))
}

// KubeletRoot is the kubelet's --root-dir (pods' volumes live below it).
func (c *Cluster) KubeletRoot() string { return c.path("kubelet", "root") }

// LogPath is the log file of a component (etcd, kube-apiserver, kubelet, ...).
func (c *Cluster) LogPath(name string) string { return c.path("logs", name+".log") }

// Start runs a long-lived process in its own session, logging to
// Dir/logs/name.log, and records it for Down.
func (c *Cluster) Start(name string, argv []string, env []string) error {
	logf, err := os.OpenFile(c.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	c.exited[name] = done
	go func() { _ = cmd.Wait(); close(done) }()
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid))
	c.Processes = append(c.Processes, Proc{Name: name, PID: cmd.Process.Pid, Exe: exe})
	return c.writeState()
}

// waitFor polls ok until it returns nil, the process name dies, or timeout.
func (c *Cluster) waitFor(ctx context.Context, name string, timeout time.Duration, ok func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ok()
		if err == nil {
			return nil
		}
		select {
		case <-c.exited[name]:
			return fmt.Errorf("%s exited during start-up; log tail:\n%s", name, tail(c.LogPath(name), 25))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v; log tail:\n%s", name, timeout, err, tail(c.LogPath(name), 25))
		}
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// --- containerd ---------------------------------------------------------------

func cniBinDir() (string, error) {
	out, err := exec.Command("dpkg", "-L", "containernetworking-plugins").Output()
	if err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasSuffix(l, "/bridge") {
				return filepath.Dir(l), nil
			}
		}
	}
	return "", errors.New("e2e cluster: CNI plugins not found (dpkg -L containernetworking-plugins)")
}

// node is where one node's containerd and kubelet keep their state.
type node struct {
	name string
	// dir is the node's directory below Dir ("" for the first node).
	dir string
	// bridge and subnet of its CNI network.
	bridge, subnet string
	// ports of its kubelet: its server and its health endpoint.
	port, healthzPort int
	// cgroupRoot of its kubelet, "" for the host's root.
	cgroupRoot string
	process    string // the names its processes are recorded under: process, "kubelet"+suffix
	suffix     string
	socket     string
}

func (c *Cluster) firstNode() *node {
	return &node{name: c.NodeName, bridge: "rse2e0", subnet: "10.244.0.0/24", port: 10250, healthzPort: 10248, process: "containerd"}
}

func (c *Cluster) secondNode() *node {
	return &node{name: SecondNodeName, dir: "node2", bridge: "rse2e1", subnet: "10.244.1.0/24", port: 10260, healthzPort: 10258,
		cgroupRoot: "/" + secondCgroupRoot, process: "containerd-node2", suffix: "-node2"}
}

func (c *Cluster) nodePath(n *node, p ...string) string {
	return c.path(append([]string{n.dir}, p...)...)
}

func (c *Cluster) startContainerd(ctx context.Context, images []string) error {
	n := c.firstNode()
	if err := c.startContainerdOn(ctx, n, images); err != nil {
		return err
	}
	c.Containerd = n.socket
	return nil
}

func (c *Cluster) startContainerdOn(ctx context.Context, n *node, images []string) error {
	cni, err := cniBinDir()
	if err != nil {
		return err
	}
	for _, d := range []string{"containerd", "cni/net.d", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(c.nodePath(n, d), 0o755); err != nil {
			return err
		}
	}
	n.socket = c.nodePath(n, "containerd", "containerd.sock")
	// restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, so runc could
	// not lower the sandbox's oom_score_adj and every sandbox would fail.
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[8]q
`, c.nodePath(n, "containerd", "root"), c.nodePath(n, "containerd", "state"), n.socket, n.socket+".ttrpc",
		PauseImage, cni, c.nodePath(n, "cni", "net.d"), c.nodePath(n, "containerd", "runc"))
	if err := os.WriteFile(c.nodePath(n, "containerd", "config.toml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	// The conflist only makes the runtime report NetworkReady (and so the
	// node Ready); every scenario pod uses the host network.
	conflist := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"restart-supervisor-e2e","plugins":[
 {"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,
  "ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"dataDir":%q}}]}`, n.bridge, n.subnet, c.nodePath(n, "cni", "ipam"))
	if err := os.WriteFile(c.nodePath(n, "cni", "net.d", "10-e2e.conflist"), []byte(conflist), 0o644); err != nil {
		return err
	}
	var env []string
	if c.ContainerdDir != "" {
		// containerd finds its shim on PATH.
		env = []string{"PATH=" + c.ContainerdDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	}
	if err := c.Start(n.process, []string{c.ContainerdTool("containerd"), "--config", c.nodePath(n, "containerd", "config.toml")}, env); err != nil {
		return err
	}
	ctr := c.ContainerdTool("ctr")
	err = c.waitFor(ctx, n.process, 30*time.Second, func() error {
		return exec.Command(ctr, "--address", n.socket, "version").Run()
	})
	if err != nil {
		return err
	}
	for _, img := range images {
		out, err := exec.CommandContext(ctx, ctr, "--address", n.socket, "-n", "k8s.io", "images", "import", "--no-unpack=false", img).CombinedOutput()
		if err != nil {
			// Older ctr has no --no-unpack flag; retry plainly.
			out, err = exec.CommandContext(ctx, ctr, "--address", n.socket, "-n", "k8s.io", "images", "import", img).CombinedOutput()
		}
		if err != nil {
			return fmt.Errorf("ctr images import %s: %v\n%s", img, err, out)
		}
	}
	return nil
}

// ContainerdTool is the path of containerd or ctr: from ContainerdDir when
// set, else as found on PATH.
func (c *Cluster) ContainerdTool(name string) string {
	if c.ContainerdDir != "" {
		return filepath.Join(c.ContainerdDir, name)
	}
	return name
}

// --- control plane ------------------------------------------------------------

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) startControlPlane(ctx context.Context, opts Options) error {
	ports := make([]int, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = p
	}
	etcdClient := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	etcdPeer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	err := c.Start("etcd", []string{filepath.Join(opts.BinDir, "etcd"),
		"--data-dir", c.path("etcd", "data"), "--name", "e2e",
		"--listen-client-urls", etcdClient, "--advertise-client-urls", etcdClient,
		"--listen-peer-urls", etcdPeer, "--initial-advertise-peer-urls", etcdPeer,
		"--initial-cluster", "e2e=" + etcdPeer, "--unsafe-no-fsync", "--log-level", "warn"}, nil)
	if err != nil {
		return err
	}

	// Service-account signing key, admin token, kubeconfig.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(c.path("pki", "sa.key"), keyPEM, 0o600); err != nil {
		return err
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	c.Token = hex.EncodeToString(tok)
	if err := os.WriteFile(c.path("pki", "tokens.csv"), []byte(c.Token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	c.APIServer = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	c.Kubeconfig = c.path("kubeconfig")
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: admin, namespace: default}
current-context: e2e
`, c.APIServer, c.Token)
	if err := os.WriteFile(c.Kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	if err := c.writeState(); err != nil {
		return err
	}
	err = c.Start("kube-apiserver", append([]string{filepath.Join(opts.BinDir, "kube-apiserver"),
		"--etcd-servers", etcdClient,
		"--bind-address", "127.0.0.1", fmt.Sprintf("--secure-port=%d", ports[2]),
		"--cert-dir", c.path("pki", "apiserver"),
		"--token-auth-file", c.path("pki", "tokens.csv"),
		"--authorization-mode", "Node,RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", c.path("pki", "sa.key"),
		"--service-account-signing-key-file", c.path("pki", "sa.key"),
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--allow-privileged=true",
		"--kubelet-preferred-address-types", "InternalIP",
	}, append(workloadAPIServerArgs(opts), gateArgs(opts.gates(c.KubeVersion))...)...), nil)
	if err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err = c.waitFor(ctx, "kube-apiserver", 60*time.Second, func() error {
		req, _ := http.NewRequest("GET", c.APIServer+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.Token)
		return expectOK(hc, req)
	})
	if err != nil {
		return err
	}
	// Without a controller-manager nobody creates the default ServiceAccount,
	// and the ServiceAccount admission plugin refuses pods without it.
	return c.waitFor(ctx, "kube-apiserver", 30*time.Second, func() error {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

func (c *Cluster) connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("e2e cluster: kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c.Config, c.Client = cfg, cs
	return nil
}

// --- kubelet ------------------------------------------------------------------

func nodeIP() (string, error) {
	// The address of the interface that carries the default route: 127.0.0.1
	// would leave the node without an InternalIP.
	conn, err := net.Dial("udp", "192.0.2.254:9")
	if err == nil {
		defer conn.Close()
		if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsLoopback() {
			return a.IP.String(), nil
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String(), nil
		}
	}
	return "", errors.New("e2e cluster: no non-loopback IPv4 address for the node")
}

func (c *Cluster) startKubelet(ctx context.Context, opts Options) error {
	n := c.firstNode()
	n.socket = c.Containerd
	argv, err := c.startKubeletOn(ctx, opts, n)
	c.kubeletArgv = argv
	return err
}

// startSecondNode starts the second node's containerd and kubelet.
func (c *Cluster) startSecondNode(ctx context.Context, opts Options, images []string) error {
	n := c.secondNode()
	// The kubelet refuses a cgroup root that does not exist; on cgroup v1
	// it must exist in every hierarchy.
	if err := makeCgroup(secondCgroupRoot); err != nil {
		return err
	}
	if err := c.startContainerdOn(ctx, n, images); err != nil {
		return err
	}
	c.Second = &SecondNodeState{NodeName: n.name, Containerd: n.socket, KubeletRoot: c.nodePath(n, "kubelet", "root")}
	if err := c.writeState(); err != nil {
		return err
	}
	_, err := c.startKubeletOn(ctx, opts, n)
	return err
}

// startKubeletOn starts node n's kubelet and waits for its node to be
// Ready; it returns the kubelet's command line.
func (c *Cluster) startKubeletOn(ctx context.Context, opts Options, n *node) ([]string, error) {
	sock := "unix://" + n.socket
	cgroupRoot := ""
	if n.cgroupRoot != "" {
		cgroupRoot = "cgroupRoot: " + n.cgroupRoot + "\n"
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %[1]s
imageServiceEndpoint: %[1]s
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
address: %[2]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[5]d
port: %[6]d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
podLogsDir: %[3]s
%[7]s%[4]s`, sock, c.NodeIP, c.nodePath(n, "pod-logs"), gateYAML(opts.kubeletGates(c.KubeVersion)), n.healthzPort, n.port, cgroupRoot)
	if err := os.WriteFile(c.nodePath(n, "kubelet", "config.yaml"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	argv := []string{filepath.Join(opts.KubeletBinDir, "kubelet"),
		"--config", c.nodePath(n, "kubelet", "config.yaml"),
		"--kubeconfig", c.Kubeconfig,
		"--root-dir", c.nodePath(n, "kubelet", "root"),
		"--hostname-override", n.name,
		"--node-ip", c.NodeIP,
		"--v=2",
	}
	name := "kubelet" + n.suffix
	if err := c.Start(name, argv, nil); err != nil {
		return nil, err
	}
	return argv, c.waitFor(ctx, name, 90*time.Second, func() error {
		nd, err := c.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return errors.New("node has no Ready condition yet")
	})
}

// RestartKubelet stops the kubelet as a service manager does (SIGTERM, then
// wait for it to exit) and starts it again with the same command line,
// returning once its health endpoint answers and it has posted a fresh node
// status. The pods' containers keep running meanwhile: containerd owns them.
// Upstream's e2e_node tests restart the kubelet in the middle of a pod
// restart the same way (test/e2e_node/restart_all_containers_test.go,
// v1.36.3).
func (c *Cluster) RestartKubelet(ctx context.Context) error {
	if c.kubeletArgv == nil {
		return errors.New("restart kubelet: this cluster was not started by Up")
	}
	var pid int
	kept := c.Processes[:0]
	for _, p := range c.Processes {
		if p.Name == "kubelet" {
			pid = p.PID
			continue
		}
		kept = append(kept, p)
	}
	if pid == 0 {
		return errors.New("restart kubelet: no kubelet process recorded")
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("restart kubelet: stop pid %d: %w", pid, err)
	}
	select {
	case <-c.exited["kubelet"]:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-c.exited["kubelet"]
	case <-ctx.Done():
		return ctx.Err()
	}
	c.Processes = kept
	stopped := time.Now()
	if err := c.Start("kubelet", c.kubeletArgv, nil); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	return c.waitFor(ctx, "kubelet", 90*time.Second, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:10248/healthz", nil)
		if err != nil {
			return err
		}
		if err := expectOK(hc, req); err != nil {
			return err
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && !cond.LastHeartbeatTime.Time.Before(stopped.Truncate(time.Second)) {
				return nil
			}
		}
		return errors.New("no Ready heartbeat from the restarted kubelet yet")
	})
}

func (c *Cluster) startControllerManager(ctx context.Context, opts Options) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	controllers := "job,endpointslice"
	if opts.GarbageCollector {
		controllers += ",garbagecollector"
	}
	var extra []string
	if opts.Workloads {
		// nodelifecycle lifts the not-ready taint that the API server's
		// TaintNodesByCondition admission puts on a new node
		// (plugin/pkg/admission/nodetaint, v1.34.4), which keeps the
		// scheduler from placing any pod.
		controllers += ",deployment,replicaset,serviceaccount,root-ca-cert-publisher,nodelifecycle"
		// The API server's self-signed serving certificate file holds its
		// CA too (k8s.io/apiserver pkg/server/options/serving.go
		// MaybeDefaultWithSelfSignedCerts, v0.34.4), and names 127.0.0.1,
		// its bind address.
		extra = append(extra, "--root-ca-file", c.path("pki", "apiserver", "apiserver.crt"))
	}
	err = c.Start("kube-controller-manager", append([]string{filepath.Join(opts.BinDir, "kube-controller-manager"),
		"--kubeconfig", c.Kubeconfig,
		"--authentication-kubeconfig", c.Kubeconfig,
		"--authorization-kubeconfig", c.Kubeconfig,
		// job for the Job rows, endpointslice for the readiness row (a
		// Service's EndpointSlice follows its pods' Ready condition),
		// garbagecollector where asked (a JobSet that restarts deletes
		// its Jobs in the foreground and waits until they are gone).
		"--controllers", controllers,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir", c.path("pki", "kcm"),
	}, extra...), nil)
	if err != nil {
		return err
	}
	return c.waitHealthz(ctx, "kube-controller-manager", port)
}

// waitHealthz waits until the component's /healthz on 127.0.0.1:port
// answers 200 (its serving certificate is self-signed).
func (c *Cluster) waitHealthz(ctx context.Context, name string, port int) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return c.waitFor(ctx, name, 60*time.Second, func() error {
		resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("healthz %d", resp.StatusCode)
		}
		return nil
	})
}

// workloadAPIServerArgs are the API server's flags for Options.Workloads.
func workloadAPIServerArgs(opts Options) []string {
	if !opts.Workloads {
		return nil
	}
	// A webhook's Service resolved to an endpoint, not to its ClusterIP
	// (cmd/kube-apiserver/app/server.go buildServiceResolver, v1.34.4).
	return []string{"--enable-aggregator-routing=true"}
}

// startScheduler runs kube-scheduler for Options.Workloads: the pods of
// Deployments carry no node name.
func (c *Cluster) startScheduler(ctx context.Context, opts Options) error {
	bin := filepath.Join(opts.BinDir, "kube-scheduler")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("e2e cluster: kube-scheduler missing in %q (run test/e2e/setup.sh)", opts.BinDir)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	err = c.Start("kube-scheduler", []string{bin,
		"--kubeconfig", c.Kubeconfig,
		"--authentication-kubeconfig", c.Kubeconfig,
		"--authorization-kubeconfig", c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
	}, nil)
	if err != nil {
		return err
	}
	return c.waitHealthz(ctx, "kube-scheduler", port)
}

// --- sysctls ------------------------------------------------------------------

func (c *Cluster) saveSysctls() error {
	saved := map[string]string{}
	for _, k := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			saved[k] = strings.TrimSpace(string(b))
		}
	}
	b, _ := json.Marshal(saved)
	return os.WriteFile(c.path("sysctl.saved.json"), b, 0o600)
}

// expectOK sends req and wants 200 back.
func expectOK(hc *http.Client, req *http.Request) error {
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", req.URL.Path, resp.StatusCode)
	}
	return nil
}
