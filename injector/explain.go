package injector

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// ContainerPlan says what happens when one container exits, for every exit
// code 0..255, once the pod is injected.
type ContainerPlan struct {
	Name string
	Kind Kind
	// RerunOf names the init container whose re-run sidecar this is (Kind
	// KindRerun).
	RerunOf       string
	Wrapped       bool
	KubeletPolicy rules.RestartPolicy // what the kubelet applies when the container has no policy
	Outcomes      []Outcome
	// Limits says, one line each, when the supervisor hands an exit the
	// rules would restart in place to the kubelet instead (rules.Limits);
	// empty without limits or when the container is not wrapped.
	Limits []string
	// Backoff describes the container's own in-place back-off where its
	// entry of the rules annotation sets one; "" for the kubelet's.
	Backoff string
}

// Outcome groups the exit codes that are handled alike.
type Outcome struct {
	Codes    string // such as "0, 2-41, 43-255"
	Handling rules.Handling
	Decision rules.Decision
	// Why names what decided: a rule, the container policy or the
	// policy the kubelet applies.
	Why string
	// Supervised is what happens with restart-supervisor, Native what a
	// kubelet implementing KEP-5307 does, Difference is empty when they
	// agree.
	Supervised, Native, Difference string
}

// Legend explains the short phrases of Outcome.
const Legend = `restart in place: the supervisor restarts the workload inside the running container, with the kubelet's backoff (10s doubling to 5m); the kubelet's restartCount does not change.
hold: the container must not restart, but the kubelet would restart it if it exited, so the supervisor keeps it running without the workload; it shows Running, not Terminated.
exit: the supervisor exits with the workload's status and the kubelet acts under its policy, exactly as without the supervisor.
re-run: a sidecar the injector adds after an init container in a pod that restarts all containers; it runs nothing at the pod's first start (the kubelet runs the init container) and runs the init container's command again on each pod restart, before the containers after it start.`

// KindRerun is the kind of a re-run sidecar in a ContainerPlan: the
// sidecar "<init container>-rerun" that runs a regular init container
// again on each pod restart (see docs/pod-level.md).
const KindRerun Kind = "re-run"

// Explain plans every container of pod, whose restart fields are validated
// like the API server of release v, and the re-run sidecars the injection
// adds, each right after its init container. The decisions come from
// rules.Plan, the same function the supervisor runs. The warnings are those
// the injection gives about re-run sidecars it cannot add.
func Explain(pod *corev1.Pod, specPath, object string, v rules.KubeVersion) ([]ContainerPlan, []string, error) {
	return explain(pod, specPath, object, v, nil)
}

// explain is Explain with the restart budget the pod's owner implies
// (ownerbudget.go), nil for none.
func explain(pod *corev1.Pod, specPath, object string, v rules.KubeVersion, budget *ownerBudget) ([]ContainerPlan, []string, error) {
	crs, err := PodRulesFor(v, pod, specPath, object)
	if err != nil {
		return nil, nil, err
	}
	applyOwnerBudget(crs, budget)
	wrap := wrapped(crs)
	rerun, warnings := reruns(pod, crs, object)
	group := groupLimitLine(pod, crs, budget)
	var plans []ContainerPlan
	for k, cr := range crs {
		p := plan(cr, ContainerPlan{Name: cr.Name, Kind: cr.Kind, KubeletPolicy: cr.KubeletPolicy, Wrapped: wrap[k]})
		if group != "" && cr.usesGroup() {
			p.Limits = append(p.Limits, group)
		}
		plans = append(plans, p)
		if name, ok := rerun[k]; ok {
			plans = append(plans, plan(cr, ContainerPlan{Name: name, Kind: KindRerun, RerunOf: cr.Name, KubeletPolicy: cr.KubeletPolicy, Wrapped: true}))
		}
	}
	return plans, warnings, nil
}

// groupLimitLine says what limits the pod's group restarts, "" when
// nothing does or no rule asks for one.
func groupLimitLine(pod *corev1.Pod, crs []ContainerRules, budget *ownerBudget) string {
	if !restartsGroup(crs) {
		return ""
	}
	then := "then a RestartGroup exit goes to the kubelet"
	if v, ok := pod.Annotations[contract.AnnotationGroupMaxRestarts]; ok {
		return fmt.Sprintf("group limit: %s group restarts (annotation %s); %s", v, contract.AnnotationGroupMaxRestarts, then)
	}
	if l := groupLimit(pod, crs, budget); l != "" {
		return fmt.Sprintf("group limit: %s group restarts (%s); %s", l, budget.groupFrom, then)
	}
	return ""
}

// plan fills cp's outcomes for container cr, or for its re-run sidecar.
func plan(cr ContainerRules, cp ContainerPlan) ContainerPlan {
	c, cfg := cr.supervised(), cr.config()
	type key struct {
		h       rules.Handling
		restart bool
		src     rules.Source
		rule    int
	}
	var order []key
	groups := map[key][]int32{}
	decisions := map[key]rules.Decision{}
	for code := int32(0); code <= 255; code++ {
		d, h := cfg.Plan(code)
		if !cp.Wrapped || cfg.HandsOver(code) {
			h = rules.HandOver
		}
		k := key{h, d.Restart, d.Source, d.Rule}
		if cp.Wrapped && cfg.HandsOver(code) {
			k.rule = handOverCode
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
			decisions[k] = d
		}
		groups[k] = append(groups[k], code)
	}
	for _, k := range order {
		d := decisions[k]
		o := Outcome{Codes: ranges(groups[k]), Handling: k.h, Decision: d}
		o.Why, o.Supervised, o.Native, o.Difference = describe(cr, c, d, k.h, cp.Wrapped)
		if k.rule == handOverCode {
			// Handed over whatever the rules say: the kubelet, which
			// does not know them, applies the policy it has.
			o.Why = "handOverExitCodes (" + o.Why + ")"
			o.Supervised = "exit; kubelet applies pod policy " + string(cr.KubeletPolicy)
			o.Difference = "the pod policy decides, not the rules"
		}
		if cp.Kind == KindRerun {
			o.Supervised, o.Difference = describeRerun(d, o.Supervised, o.Difference)
		}
		cp.Outcomes = append(cp.Outcomes, o)
	}
	if cp.Wrapped {
		cp.Limits = limitLines(cfg.Limits, cr.KubeletPolicy)
		if cr.BudgetFrom != "" && len(cp.Limits) > 0 && cfg.Limits.RestartBudget != nil {
			cp.Limits[0] += " (from the owner's " + cr.BudgetFrom + ")"
		}
		cp.Backoff = backoffLine(cr.Backoff)
	}
	return cp
}

// backoffLine describes a container's own back-off, "" when it sets none
// and the kubelet's curve applies. The injector's --backoff-initial and
// --backoff-max, which fill what the container leaves unset, are the
// webhook's flags and not known here.
func backoffLine(b rules.Backoff) string {
	if b.Initial == nil && b.Max == nil && b.ResetAfter == nil {
		return ""
	}
	var set []string
	for _, f := range []struct {
		name string
		v    *rules.Duration
	}{{"initial", b.Initial}, {"max", b.Max}, {"resetAfter", b.ResetAfter}} {
		if f.v != nil {
			set = append(set, f.name)
		}
	}
	return fmt.Sprintf("back-off in place: %s doubling to %s, forgotten after %s of running (%s from the container's entry of %s, the rest the kubelet's)",
		b.InitialDelay(), b.MaxDelay(), b.ResetAfterDuration(), strings.Join(set, ", "), contract.AnnotationRules)
}

// handOverCode stands for "in handOverExitCodes" in plan's grouping key,
// where a rule's index would be.
const handOverCode = -2

// limitLines describes the limits that turn a restart in place into a
// hand-over to the kubelet, whose policy (pod) then decides.
func limitLines(l rules.Limits, pod rules.RestartPolicy) []string {
	handed := "the exit is handed to the kubelet (pod restartPolicy " + string(pod) + ")"
	var out []string
	if b := l.RestartBudget; b != nil {
		within := " in the pod's life (not reset by the kubelet's restarts)"
		if w := b.WindowDuration(); w > 0 {
			within = " within any " + w.String()
		}
		out = append(out, fmt.Sprintf("restart budget: at most %d in-place restarts%s; %s", b.Max(), within, "then "+handed))
	}
	if p := l.Progress; p != nil {
		out = append(out, fmt.Sprintf("progress: after %d in-place restarts without a change of %s, %s", p.MaxStalledRestarts, p.File, handed))
	}
	if c := l.PreRestartCheck; c != nil {
		out = append(out, fmt.Sprintf("pre-restart check: %s (timeout %s) before each in-place restart; when it fails, %s", strings.Join(c.Command, " "), c.Timeout(), handed))
	}
	if w := l.Watchdog; w != nil {
		out = append(out, watchdogLine(w))
	}
	if e := l.Escalation; e != nil {
		out = append(out, escalationLine(e, handed))
	}
	return out
}

// escalationLine says which action each of the container's own in-place
// restarts takes, step by step, and what comes past the last.
func escalationLine(e *rules.Escalation, handed string) string {
	within := " in the pod's life"
	if w := e.WindowDuration(); w > 0 {
		within = " within any " + w.String()
	}
	var steps []string
	from := 1
	for _, st := range e.Steps {
		span := fmt.Sprintf("%d", from)
		if to := from + int(st.Restarts) - 1; to > from {
			span = fmt.Sprintf("%d-%d", from, to)
		}
		steps = append(steps, span+": "+string(st.Action))
		from += int(st.Restarts)
	}
	return fmt.Sprintf("escalation: the exits a rule restarts in place climb by the container's own restarts%s: %s; then %s",
		within, strings.Join(steps, "; "), handed)
}

// watchdogLine says what the watchdog watches and what a stall becomes.
func watchdogLine(w *rules.Watchdog) string {
	var beats []string
	if w.HeartbeatFile != "" {
		beats = append(beats, "a change of "+w.HeartbeatFile)
	}
	if w.OutputPattern != "" {
		beats = append(beats, fmt.Sprintf("an output line matching %q", w.OutputPattern))
	}
	grace := "30s"
	if g := w.GracePeriodSeconds; g != nil {
		grace = (time.Duration(*g) * time.Second).String()
	}
	return fmt.Sprintf("watchdog: heartbeat %s; none within %s of a start or %s of the last one: the run is stopped (grace %s) and its exit judged as exit code %d, reason %s, by the rules above",
		strings.Join(beats, " or "), w.FirstHeartbeat(), w.Stall(), grace, w.Code(), rules.ReasonStalled)
}

// describeRerun is what an exit of a re-run, during a pod restart, does:
// Native stays what the init container's own exit does upstream.
func describeRerun(d rules.Decision, sup, diff string) (string, string) {
	switch {
	case d.Source == rules.SourceInitialized:
		return "re-run done: the containers after it start", ""
	case d.Restart && (d.Action == rules.ActionRestartAllContainers || d.Action == rules.ActionRestartGroup):
		return sup, diff
	case d.Restart:
		return "runs again before the containers after it start", ""
	}
	return "the containers after it end: the pod fails", ""
}

func describe(cr ContainerRules, c rules.Container, d rules.Decision, h rules.Handling, wrapped bool) (why, sup, native, diff string) {
	why = "pod policy " + string(cr.KubeletPolicy)
	switch cr.Kind {
	case KindInit:
		why = "init container, pod policy " + podPolicyFor(cr)
	case KindSidecar:
		why = "sidecar"
	}
	if d.Source == rules.SourceContainerPolicy {
		why = "container policy " + string(*c.RestartPolicy)
	}
	if d.Source == rules.SourceRule {
		r := c.RestartPolicyRules[d.Rule]
		why = fmt.Sprintf("rule %d: %s %s %v", d.Rule, r.Action, r.ExitCodes.Operator, r.ExitCodes.Values)
	}
	all := d.Action == rules.ActionRestartAllContainers
	group := d.Action == rules.ActionRestartGroup
	switch {
	case d.Source == rules.SourceInitialized:
		why = "init container succeeded: rules not consulted"
		native = "initialized"
	case d.Restart && all:
		native = "kubelet restarts all containers"
	case d.Restart && group:
		// No kubelet has the action; the API server refuses it.
		native = "no native equivalent: the API server refuses RestartGroup"
	case d.Restart:
		native = "kubelet restarts it"
	default:
		native = "stays terminated"
	}
	if !wrapped {
		return why, "not wrapped: " + native, native, ""
	}
	switch h {
	case rules.RestartInPlace:
		sup = "restart in place"
		if all {
			sup = "restart all containers in place"
		}
		if group {
			sup = "restart every container of the pod's group in place (node agent)"
		}
		diff = "restartCount unchanged"
	case rules.Hold:
		sup = "hold"
		diff = "shows Running, not Terminated"
		if cr.Kind == KindInit {
			diff = "pod stays initializing instead of failing"
		}
	default:
		sup = "exit; " + native
	}
	return why, sup, native, diff
}

func podPolicyFor(cr ContainerRules) string {
	if cr.KubeletPolicy == rules.Never {
		return "Never"
	}
	return "Always/OnFailure"
}

// ranges writes sorted codes as "0, 2-41, 43-255".
func ranges(codes []int32) string {
	var parts []string
	for i := 0; i < len(codes); {
		j := i
		for j+1 < len(codes) && codes[j+1] == codes[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(int(codes[i])))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", codes[i], codes[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// ObjectPlan is Explain for one object of a manifest stream.
type ObjectPlan struct {
	Object    string
	PodPolicy string
	// PodPolicyFrom says where PodPolicy comes from when the object's
	// controller sets it (a Kubeflow replica spec, say); empty when it is
	// the template's own.
	PodPolicyFrom string
	Containers    []ContainerPlan
	Warnings      []string
}

// ExplainObject explains every pod template of obj, a Pod or a workload
// (not a List), validated like release v.
func ExplainObject(obj map[string]any, v rules.KubeVersion) ([]ObjectPlan, error) {
	u := &unstructured.Unstructured{Object: obj}
	ts, _, err := templatesOf(obj, u.GetAPIVersion(), u.GetKind())
	object := ObjectName(u.GetKind(), u.GetNamespace(), u.GetName(), u.GetGenerateName())
	if err != nil {
		return nil, fmt.Errorf("%s: %v", object, err)
	}
	var out []ObjectPlan
	for _, t := range ts {
		pod, err := templatePod(t, object)
		if err != nil {
			return out, err
		}
		plans, warnings, err := explain(pod, t.specPath(), object, v, t.budget)
		if err != nil {
			return out, err
		}
		policy := string(pod.Spec.RestartPolicy)
		if policy == "" {
			policy = "Always"
		}
		name := object
		if len(ts) > 1 {
			name += " " + t.label()
		}
		from := ""
		if t.derived != nil {
			from = t.derived.from
		}
		if w := policyWarning(t, object); w != "" {
			warnings = append([]string{w}, warnings...)
		}
		out = append(out, ObjectPlan{Object: name, PodPolicy: policy, PodPolicyFrom: from, Containers: plans, Warnings: warnings})
	}
	return out, nil
}
