package injector

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

func rl(cpu, mem string) corev1.ResourceList {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

// TestInstallContainerResources: the install container takes the CPU and
// memory of the pod's regular container with the most CPU, so the pod's
// QoS class, its effective requests and limits and every LimitRange bound
// that container met stay as they are; none for a BestEffort pod;
// Options.InitResources wins when set.
func TestInstallContainerResources(t *testing.T) {
	rules := []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	pod := func(res ...corev1.ResourceRequirements) *corev1.Pod {
		p := &corev1.Pod{}
		for i, r := range res {
			c := corev1.Container{Name: string(rune('a' + i)), Command: []string{"x"}, Resources: r}
			if i == 0 {
				c.RestartPolicy, c.RestartPolicyRules = ptr.To(corev1.ContainerRestartPolicyNever), rules
			}
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		return p
	}
	guaranteed := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: rl(cpu, mem), Limits: rl(cpu, mem)}
	}
	podLevel := pod(corev1.ResourceRequirements{Limits: rl("1", "1Gi")})
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("2", "2Gi")}
	override := corev1.ResourceRequirements{Requests: rl("10m", "16Mi"), Limits: rl("10m", "16Mi")}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		opts Options
		want corev1.ResourceRequirements
	}{
		{"Guaranteed: the container with the most CPU", pod(guaranteed("250m", "1Gi"), guaranteed("1", "256Mi"), guaranteed("1", "128Mi")), Options{}, guaranteed("1", "256Mi")},
		{"Burstable, requests only", pod(corev1.ResourceRequirements{Requests: rl("100m", "64Mi")}), Options{}, corev1.ResourceRequirements{Requests: rl("100m", "64Mi")}},
		{"Burstable, a limit above the request", pod(corev1.ResourceRequirements{Requests: rl("100m", ""), Limits: rl("2", "")}, corev1.ResourceRequirements{Requests: rl("1500m", "1Gi")}),
			Options{}, corev1.ResourceRequirements{Requests: rl("100m", ""), Limits: rl("2", "")}},
		{"memory only: the most memory", pod(corev1.ResourceRequirements{Requests: rl("", "64Mi")}, corev1.ResourceRequirements{Requests: rl("", "1Gi")}), Options{}, corev1.ResourceRequirements{Requests: rl("", "1Gi")}},
		{"extended resources are not copied", pod(corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("4")},
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}), Options{}, corev1.ResourceRequirements{Requests: rl("4", "")}},
		{"BestEffort", pod(corev1.ResourceRequirements{}), Options{}, corev1.ResourceRequirements{}},
		{"pod-level requests, container limits: the limits stay declared", podLevel, Options{}, corev1.ResourceRequirements{Limits: rl("1", "1Gi")}},
		{"InitResources set", pod(guaranteed("1", "1Gi")), Options{InitResources: &override}, override},
	} {
		res, err := New(c.opts).MutatePod(context.Background(), c.pod)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		install := res.Pod.Spec.InitContainers[0]
		if install.Name != contract.InstallContainer {
			t.Fatalf("%s: first init container %q", c.name, install.Name)
		}
		if !apiequality.Semantic.DeepEqual(install.Resources, c.want) {
			t.Errorf("%s: install container resources %v, want %v", c.name, install.Resources, c.want)
		}
	}
}
