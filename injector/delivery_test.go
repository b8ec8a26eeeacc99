package injector

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// TestImageDeliveryIsTheCopyWithoutItsInstallContainer: for every pod of
// the golden corpus, the image delivery's result is the copy delivery's
// with the install container removed, the binary volume an image volume of
// the supervisor image (the copy's pull policy), and the status annotation
// naming the delivery. So every wrapped container, re-run sidecar and init
// container edit lands on the same container at its new index, which is
// what the index arithmetic of mutate gets wrong if it is wrong.
func TestImageDeliveryIsTheCopyWithoutItsInstallContainer(t *testing.T) {
	opts := Options{SupervisorImage: "registry.test/restart-supervisor@sha256:" + sha64, ImagePullPolicy: corev1.PullIfNotPresent}
	copyInj := New(opts)
	opts.Delivery = DeliveryImage
	imageInj := New(opts)
	injected := 0
	for name, pod := range goldenPods(t) {
		ctx := context.Background()
		want, errCopy := copyInj.MutatePod(ctx, pod)
		got, errImage := imageInj.MutatePod(ctx, pod)
		if (errCopy == nil) != (errImage == nil) {
			t.Errorf("%s: copy err %v, image err %v", name, errCopy, errImage)
			continue
		}
		if errCopy != nil || !want.Injected {
			if errCopy == nil && got.Injected {
				t.Errorf("%s: injected by image delivery only", name)
			}
			continue
		}
		injected++
		exp := want.Pod.DeepCopy()
		i := slices.IndexFunc(exp.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == contract.InstallContainer })
		if i != 0 {
			t.Fatalf("%s: copy delivery's install container at %d", name, i)
		}
		exp.Spec.InitContainers = slices.Delete(exp.Spec.InitContainers, 0, 1)
		if len(exp.Spec.InitContainers) == 0 {
			exp.Spec.InitContainers = nil
		}
		for k := range exp.Spec.Volumes {
			if exp.Spec.Volumes[k].Name == contract.BinVolume {
				exp.Spec.Volumes[k].VolumeSource = corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: opts.SupervisorImage, PullPolicy: corev1.PullIfNotPresent}}
			}
		}
		var st Status
		if err := json.Unmarshal([]byte(exp.Annotations[contract.AnnotationStatus]), &st); err != nil {
			t.Fatal(err)
		}
		st.Delivery = "image"
		b, _ := json.Marshal(st)
		exp.Annotations[contract.AnnotationStatus] = string(b)
		if !apiequality.Semantic.DeepEqual(exp, got.Pod) {
			e, _ := json.Marshal(exp.Spec)
			g, _ := json.Marshal(got.Pod.Spec)
			t.Errorf("%s: image delivery differs from the copy without its install container:\nwant %s\ngot  %s", name, e, g)
		}
		if !slices.Equal(want.Containers, got.Containers) || !slices.Equal(want.Warnings, got.Warnings) {
			t.Errorf("%s: containers %q warnings %q, copy's %q %q", name, got.Containers, got.Warnings, want.Containers, want.Warnings)
		}
		// Injected again, the pod is left as it is, as a copied one is.
		again, err := imageInj.MutatePod(ctx, got.Pod)
		if err != nil || again.Injected {
			t.Errorf("%s: second injection: %v, injected %v", name, err, again != nil && again.Injected)
		}
	}
	if injected < 10 {
		t.Fatalf("only %d golden pods injected", injected)
	}
}

const sha64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestDeliveryPerCall: Call.Delivery overrides Options.Delivery, and an
// empty one keeps it.
func TestDeliveryPerCall(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Command: []string{"x"},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever),
		RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}}}}}
	for _, c := range []struct {
		opt, ctx Delivery
		install  bool
	}{{"", "", true}, {DeliveryImage, "", false}, {DeliveryImage, DeliveryCopy, true}, {DeliveryCopy, DeliveryImage, false}} {
		res, err := New(Options{Delivery: c.opt}).MutatePodWith(context.Background(), pod, Call{Delivery: c.ctx})
		if err != nil {
			t.Fatal(err)
		}
		has := slices.ContainsFunc(res.Pod.Spec.InitContainers, func(ic corev1.Container) bool { return ic.Name == contract.InstallContainer })
		image := res.Pod.Spec.Volumes[0].Image != nil
		if has != c.install || image == c.install {
			t.Errorf("options %q context %q: install container %v, image volume %v", c.opt, c.ctx, has, image)
		}
	}
	if _, err := ParseDelivery("volume"); err == nil || err.Error() != `delivery "volume": want copy or image` {
		t.Errorf("ParseDelivery: %v", err)
	}
}

// TestPullSecretsAdded: the configured pull secrets join the pod's, once
// each, after those it has.
func TestPullSecretsAdded(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "own"}, {Name: "shared"}},
		Containers: []corev1.Container{{Name: "app", Command: []string{"x"}, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever),
			RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}}}}}
	res, err := New(Options{PullSecrets: []string{"shared", "registry", "", "registry"}}).MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res.Pod.Spec.ImagePullSecrets {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"own", "shared", "registry"}) {
		t.Errorf("imagePullSecrets %q", names)
	}
	pod.Spec.ImagePullSecrets = nil
	res, err = New(Options{PullSecrets: []string{"registry"}}).MutatePod(context.Background(), pod)
	if err != nil || len(res.Pod.Spec.ImagePullSecrets) != 1 || res.Pod.Spec.ImagePullSecrets[0].Name != "registry" {
		t.Errorf("pod without pull secrets: %v %v", err, res.Pod.Spec.ImagePullSecrets)
	}
}
