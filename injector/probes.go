package injector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// wrappedProbes moves a wrapped container's liveness and startup probes
// into the supervisor's configuration. The supervisor runs them itself,
// re-armed at every in-place start and never while the workload is in
// back-off or held; left to the kubelet they would probe a container
// whose workload is not running and kill it by the pod's policy instead of
// the container's. Named ports are resolved against the container's ports,
// as the kubelet's prober does, and a probe without
// terminationGracePeriodSeconds gets the pod's, which the kubelet would
// use to kill the container. Every handler moves: exec, httpGet,
// tcpSocket and grpc (restart-probe runs the network ones).
func wrappedProbes(object string, c *corev1.Container, podGrace *int64) (*rules.Probes, error) {
	if c.LivenessProbe == nil && c.StartupProbe == nil {
		return nil, nil
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if podGrace != nil && *podGrace > 0 {
		grace = *podGrace
	}
	var ps rules.Probes
	var err error
	if c.LivenessProbe != nil {
		if ps.Liveness, err = probeOf(c, c.LivenessProbe, grace); err != nil {
			return nil, fmt.Errorf("%s: container %q: livenessProbe: %v", object, c.Name, err)
		}
	}
	if c.StartupProbe != nil {
		if ps.Startup, err = probeOf(c, c.StartupProbe, grace); err != nil {
			return nil, fmt.Errorf("%s: container %q: startupProbe: %v", object, c.Name, err)
		}
	}
	return &ps, nil
}

func probeOf(c *corev1.Container, p *corev1.Probe, grace int64) (*rules.Probe, error) {
	r := &rules.Probe{
		InitialDelaySeconds: p.InitialDelaySeconds, TimeoutSeconds: p.TimeoutSeconds, PeriodSeconds: p.PeriodSeconds,
		SuccessThreshold: p.SuccessThreshold, FailureThreshold: p.FailureThreshold,
		TerminationGracePeriodSeconds: p.TerminationGracePeriodSeconds,
	}
	if r.TerminationGracePeriodSeconds == nil {
		g := grace
		r.TerminationGracePeriodSeconds = &g
	}
	var err error
	switch h := p.ProbeHandler; {
	case h.Exec != nil:
		r.Exec = &rules.ExecAction{Command: h.Exec.Command}
	case h.HTTPGet != nil:
		a := &rules.HTTPGetAction{Path: h.HTTPGet.Path, Host: h.HTTPGet.Host, Scheme: string(h.HTTPGet.Scheme)}
		if a.Port, err = resolvePort(c, h.HTTPGet.Port, "httpGet.port"); err != nil {
			return nil, err
		}
		for _, hd := range h.HTTPGet.HTTPHeaders {
			a.HTTPHeaders = append(a.HTTPHeaders, rules.HTTPHeader{Name: hd.Name, Value: hd.Value})
		}
		r.HTTPGet = a
	case h.TCPSocket != nil:
		a := &rules.TCPSocketAction{Host: h.TCPSocket.Host}
		if a.Port, err = resolvePort(c, h.TCPSocket.Port, "tcpSocket.port"); err != nil {
			return nil, err
		}
		r.TCPSocket = a
	case h.GRPC != nil:
		r.GRPC = &rules.GRPCAction{Port: h.GRPC.Port, Service: h.GRPC.Service}
	}
	return r, nil
}

// resolvePort turns a probe's port into a number: a named port is looked
// up in the container's ports, as the kubelet's prober does
// (pkg/kubelet/prober/prober.go, v1.35.4, probe.ResolveContainerPort).
func resolvePort(c *corev1.Container, port intstr.IntOrString, field string) (int32, error) {
	if port.Type == intstr.Int {
		return port.IntVal, nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("%s: named port %q is not among the container's ports", field, port.StrVal)
}

// kubeletStartup is the startup probe a container whose startup probe the
// supervisor runs gets in its place: `restart-probe started` every second,
// successful once the workload's own startup probe has succeeded, so that
// the kubelet's view of the container's start (its started field, and the
// start of the containers after a sidecar) follows the workload's as it
// would natively. It never reaches its failure threshold: the supervisor
// stops and restarts a workload that fails to start, and the container,
// which is still running, must not be killed for it by the kubelet.
func kubeletStartup() *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{contract.ProbePath, "started"}}},
		PeriodSeconds: 1, TimeoutSeconds: 2, SuccessThreshold: 1, FailureThreshold: math.MaxInt32}
}

// readinessFor returns the readiness probe a wrapped container gets in
// place of its own, and the check that moves into the configuration (nil
// when the container had none). The kubelet keeps running it, as an exec
// probe of `restart-probe ready`, which answers not ready while the
// supervisor runs no workload (back-off, held, a pod restart) and
// otherwise with the original check: natively a container whose process
// has exited is not ready, and the pod leaves its Services' endpoints. A
// container without a readiness probe gets one every 2 s, ready after one
// success and not ready after one failure. The original timing stays, with
// one second more of timeout for restart-probe to report the original
// check's own timeout.
func readinessFor(c *corev1.Container) (kubelet *corev1.Probe, moved *rules.Probe, err error) {
	cmd := &corev1.ExecAction{Command: []string{contract.ProbePath, "ready"}}
	orig := c.ReadinessProbe
	if orig == nil {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: cmd}, PeriodSeconds: 2, TimeoutSeconds: 2,
			SuccessThreshold: 1, FailureThreshold: 1}, nil, nil
	}
	if moved, err = probeOf(c, orig, 0); err != nil {
		return nil, nil, err
	}
	moved.TerminationGracePeriodSeconds = nil // not allowed on readiness
	timeout := orig.TimeoutSeconds
	if timeout <= 0 {
		timeout = 1
	}
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: cmd}, InitialDelaySeconds: orig.InitialDelaySeconds,
		PeriodSeconds: orig.PeriodSeconds, TimeoutSeconds: timeout + 1, SuccessThreshold: orig.SuccessThreshold,
		FailureThreshold: orig.FailureThreshold}, moved, nil
}

// jsonNull is a patch value of null (PatchOp.Value omits a nil one).
var jsonNull = json.RawMessage("null")

// replacing returns probe as the value of a patch that puts it in place
// of orig: probe's own fields in their order, then every field orig sets
// and probe does not (a handler of another kind, an initial delay) as
// null, so that a merge of it over orig (kubectl apply) leaves none of
// orig's behind. probe itself when there is no orig. Probes and lifecycle
// handlers alike.
func replacing[T any](probe, orig *T) any {
	if orig == nil {
		return probe
	}
	is, err := json.Marshal(probe)
	if err != nil {
		return probe // a k8s.io/api type: not reached
	}
	b, err := json.Marshal(orig)
	var was map[string]json.RawMessage
	if err != nil || json.Unmarshal(b, &was) != nil {
		return probe
	}
	var set map[string]json.RawMessage
	if json.Unmarshal(is, &set) != nil {
		return probe
	}
	var missing []string
	for k := range was {
		if _, ok := set[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return probe
	}
	sort.Strings(missing)
	out := bytes.TrimSuffix(is, []byte("}"))
	for _, k := range missing {
		out = append(out, ',')
		out = strconv.AppendQuote(out, k)
		out = append(out, ":null"...)
	}
	return json.RawMessage(append(out, '}'))
}
