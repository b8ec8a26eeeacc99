package apiserver_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// clusterScoped are the kinds the chart renders without a namespace.
var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "MutatingWebhookConfiguration": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// everyComponent turns on every optional object of the chart.
var everyComponent = []string{"customWorkloads.enabled=true", "webhookIngress.enabled=true", "nodeAgent.enabled=true",
	"nodeAgent.annotate=true", "nodeAgent.serviceMonitor.enabled=true", "webhook.serviceMonitor.enabled=true", "prometheusRule.enabled=true"}

func setArgs(sets ...string) []string {
	var args []string
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// jsonAt is the JSON of the value at path (map keys and list indexes) in
// obj, "null" where there is none.
func jsonAt(obj map[string]any, path ...any) string {
	var v any = obj
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[p]
		case int:
			l, _ := v.([]any)
			if p >= len(l) {
				v = nil
				break
			}
			v = l[p]
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestChartReleaseNamespace renders the chart as `helm install rel -n
// other` would, with each certificate source and every component: every
// namespaced object is in other (the node agent's in other-node-agent, the
// namespace the chart creates for its hostPath), every object is named from
// the release and carries the release's labels, and every name one object
// gives another (Service, Secrets, Issuers, webhook configuration, CA
// injection, ServiceAccount subjects, the binary's flags) is the name
// rendered.
func TestChartReleaseNamespace(t *testing.T) {
	h := newHelm(t)
	for _, source := range []string{"cert-manager", "self"} {
		for _, release := range []struct{ name, fullname string }{
			{"rel", "rel-restart-injector"},
			{"restart-injector-canary", "restart-injector-canary"},
		} {
			t.Run(source+"/"+release.name, func(t *testing.T) {
				args := append([]string{"template", release.name, chartDir(t), "--namespace", "other", "--skip-tests"},
					setArgs(append([]string{"certificates.source=" + source}, everyComponent...)...)...)
				out, err := h.run(args...)
				if err != nil {
					t.Fatal(err)
				}
				objs := parseObjects(t, "helm template", out)
				checkRelease(t, objs, release.name, release.fullname, source, "other", 25)
			})
		}
	}
	t.Run("fullnameOverride", func(t *testing.T) {
		out, err := h.run(append([]string{"template", "rel", chartDir(t), "--namespace", "other", "--skip-tests"},
			setArgs(append([]string{"certificates.source=self", "fullnameOverride=ri"}, everyComponent...)...)...)...)
		if err != nil {
			t.Fatal(err)
		}
		checkRelease(t, parseObjects(t, "helm template", out), "rel", "ri", "self", "other", 25)
	})
	// The default release name renders deploy/'s names, in the release's
	// namespace.
	out, err := h.run("template", "restart-injector", chartDir(t), "--namespace", "other", "--skip-tests")
	if err != nil {
		t.Fatal(err)
	}
	objs := parseObjects(t, "helm template", out)
	checkRelease(t, objs, "restart-injector", "restart-injector", "cert-manager", "other", 13)
	if _, ok := objs["v1 Namespace /other"]; ok {
		t.Error("the chart renders the release's namespace without namespace.create")
	}
}

func checkRelease(t *testing.T, objs map[string]map[string]any, release, fullname, source, ns string, minObjects int) {
	t.Helper()
	agentNS := ns + "-node-agent"
	agent := "restart-supervisor-node-agent"
	if fullname != "restart-injector" {
		agent = fullname + "-node-agent"
	}
	if len(objs) < minObjects {
		t.Fatalf("only %d objects rendered: %v", len(objs), sortedKeys(objs))
	}
	for k, o := range objs {
		kind := fmt.Sprint(o["kind"])
		meta, _ := o["metadata"].(map[string]any)
		name := fmt.Sprint(meta["name"])
		gotNS, hasNS := meta["namespace"]
		isAgent := strings.HasPrefix(name, agent) || name == agentNS
		switch {
		case clusterScoped[kind] && hasNS:
			t.Errorf("%s: a cluster-scoped object with a namespace", k)
		case !clusterScoped[kind] && isAgent && gotNS != agentNS:
			t.Errorf("%s: not in the node agent's namespace %s", k, agentNS)
		case !clusterScoped[kind] && !isAgent && gotNS != ns:
			t.Errorf("%s: not in the release's namespace %s", k, ns)
		}
		if kind != "Namespace" && !isAgent && name != fullname && !strings.HasPrefix(name, fullname+"-") {
			t.Errorf("%s: not named from the release (%s)", k, fullname)
		}
		wantName := "restart-injector"
		if isAgent {
			// The agent's label stays whatever its name: `restart-injector
			// status` finds its pods by it.
			wantName = "restart-supervisor-node-agent"
		}
		labels, _ := meta["labels"].(map[string]any)
		want := map[string]string{"app.kubernetes.io/name": wantName, "app.kubernetes.io/instance": release,
			"app.kubernetes.io/version": "v0.1.0", "app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "restart-injector-0.1.0"}
		for _, l := range releaseLabels {
			if fmt.Sprint(labels[l]) != want[l] {
				t.Errorf("%s: label %s = %v, want %s", k, l, labels[l], want[l])
			}
		}
		if tmpl := dig(o, "spec", "template", "metadata"); tmpl != nil {
			pl, _ := tmpl["labels"].(map[string]any)
			for _, l := range releaseLabels {
				if fmt.Sprint(pl[l]) != want[l] {
					t.Errorf("%s: pod label %s = %v, want %s", k, l, pl[l], want[l])
				}
			}
		}
	}

	get := func(key string) map[string]any {
		t.Helper()
		o, ok := objs[key]
		if !ok {
			t.Fatalf("no object %s in %v", key, sortedKeys(objs))
		}
		return o
	}
	eq := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %s, want %s", what, got, want)
		}
	}
	deploy := get("apps/v1 Deployment " + ns + "/" + fullname)
	svc := get("v1 Service " + ns + "/" + fullname)
	mwc := get("admissionregistration.k8s.io/v1 MutatingWebhookConfiguration /" + fullname)
	get("v1 ServiceAccount " + ns + "/" + fullname)
	pod := []any{"spec", "template", "spec"}
	eq("serviceAccountName", jsonAt(deploy, append(pod, "serviceAccountName")...), `"`+fullname+`"`)
	eq("Service selector", jsonAt(svc, "spec", "selector"), jsonAt(deploy, "spec", "selector", "matchLabels"))
	entries, _ := mwc["webhooks"].([]any)
	if len(entries) < 2 {
		t.Fatalf("%d webhook entries", len(entries))
	}
	for i := range entries {
		eq(fmt.Sprintf("webhook %d service", i), jsonAt(mwc, "webhooks", i, "clientConfig", "service"),
			fmt.Sprintf(`{"name":%q,"namespace":%q,"path":"/mutate","port":443}`, fullname, ns))
		eq(fmt.Sprintf("webhook %d excludes its namespace", i), jsonAt(mwc, "webhooks", i, "namespaceSelector", "matchExpressions", 0, "values", 3), `"`+ns+`"`)
	}
	for _, b := range []string{"ClusterRoleBinding /" + fullname, "RoleBinding " + ns + "/" + fullname} {
		o := get("rbac.authorization.k8s.io/v1 " + b)
		eq(b+" subject", jsonAt(o, "subjects", 0), fmt.Sprintf(`{"kind":"ServiceAccount","name":%q,"namespace":%q}`, fullname, ns))
		eq(b+" roleRef", jsonAt(o, "roleRef", "name"), `"`+fullname+`"`)
	}
	args := jsonAt(deploy, append(pod, "containers", 0, "args")...)
	renamed := fullname != "restart-injector"
	for _, flag := range []string{"--service=" + fullname, "--webhook-config=" + fullname} {
		if strings.Contains(args, `"`+flag+`"`) != renamed {
			t.Errorf("args %s: %s wanted %v", args, flag, renamed)
		}
	}
	if source == "self" {
		if strings.Contains(args, `"--ca-secret=`+fullname+`-ca"`) != renamed {
			t.Errorf("args %s: --ca-secret wanted %v", args, renamed)
		}
		certs := get("rbac.authorization.k8s.io/v1 Role " + ns + "/" + fullname + "-certs")
		eq("CA Secret rule", jsonAt(certs, "rules", 1, "resourceNames"), `["`+fullname+`-ca"]`)
		cfg := get("rbac.authorization.k8s.io/v1 ClusterRole /" + fullname + "-webhook-config")
		eq("webhook config rule", jsonAt(cfg, "rules", 0, "resourceNames"), `["`+fullname+`"]`)
	} else {
		cert := get("cert-manager.io/v1 Certificate " + ns + "/" + fullname)
		eq("inject-ca-from", jsonAt(mwc, "metadata", "annotations", "cert-manager.io/inject-ca-from"), `"`+ns+`/`+fullname+`"`)
		eq("dnsNames", jsonAt(cert, "spec", "dnsNames"), fmt.Sprintf(`["%s.%s.svc","%s.%s.svc.cluster.local"]`, fullname, ns, fullname, ns))
		eq("TLS Secret", jsonAt(deploy, append(pod, "volumes", 0, "secret", "secretName")...), jsonAt(cert, "spec", "secretName"))
		eq("issuer", jsonAt(cert, "spec", "issuerRef", "name"), `"`+fullname+`-ca"`)
		ca := get("cert-manager.io/v1 Certificate " + ns + "/" + fullname + "-ca")
		get("cert-manager.io/v1 Issuer " + ns + "/" + fullname + "-ca")
		eq("CA issuer", jsonAt(ca, "spec", "issuerRef", "name"), `"`+fullname+`-selfsigned"`)
		get("cert-manager.io/v1 Issuer " + ns + "/" + fullname + "-selfsigned")
	}
	if objs["apps/v1 DaemonSet "+agentNS+"/"+agent] == nil {
		return
	}
	ds := get("apps/v1 DaemonSet " + agentNS + "/" + agent)
	get("v1 Namespace /" + agentNS)
	eq("node agent ServiceAccount", jsonAt(ds, append(pod, "serviceAccountName")...), `"`+agent+`"`)
	crb := get("rbac.authorization.k8s.io/v1 ClusterRoleBinding /" + agent)
	eq("node agent subject", jsonAt(crb, "subjects", 0), fmt.Sprintf(`{"kind":"ServiceAccount","name":%q,"namespace":%q}`, agent, agentNS))
	vap := get("admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy /" + agent + "-annotate")
	if !strings.Contains(jsonAt(vap, "spec", "matchConditions", 0, "expression"), "system:serviceaccount:"+agentNS+":"+agent) {
		t.Errorf("the annotate policy matches another user: %s", jsonAt(vap, "spec", "matchConditions", 0, "expression"))
	}
	vapb := get("admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding /" + agent + "-annotate")
	eq("policy binding", jsonAt(vapb, "spec", "policyName"), `"`+agent+`-annotate"`)
}

// portOf resolves a container port given by name or number to its number.
func portOf(ctr map[string]any, port any) string {
	if name, ok := port.(string); ok {
		ports, _ := ctr["ports"].([]any)
		for _, p := range ports {
			p, _ := p.(map[string]any)
			if p["name"] == name {
				return fmt.Sprint(p["containerPort"])
			}
		}
		return "no port " + name
	}
	return fmt.Sprint(port)
}

// TestChartPortAndHostNetwork: webhook.port and webhook.healthPort reach
// the flags the binary listens on, the containerPorts, the Service's
// targetPort, the probes and the NetworkPolicy, alone and on the host
// network; the defaults leave the binary's own (:8443, :8081).
func TestChartPortAndHostNetwork(t *testing.T) {
	h := newHelm(t)
	for _, c := range []struct {
		name             string
		set              []string
		port, healthPort string
		hostNetwork      bool
	}{
		{"defaults", nil, "8443", "8081", false},
		{"gke-private", []string{"webhook.port=10250"}, "10250", "8081", false},
		{"host-network", []string{"webhook.hostNetwork=true", "webhook.port=10260", "webhook.healthPort=10261"}, "10260", "10261", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := h.run(append([]string{"template", "restart-injector", chartDir(t), "-n", "restart-supervisor"},
				setArgs(append([]string{"webhookIngress.enabled=true"}, c.set...)...)...)...)
			if err != nil {
				t.Fatal(err)
			}
			objs := parseObjects(t, "helm template", out)
			deploy := objs["apps/v1 Deployment restart-supervisor/restart-injector"]
			svc := objs["v1 Service restart-supervisor/restart-injector"]
			np := objs["networking.k8s.io/v1 NetworkPolicy restart-supervisor/restart-injector"]
			if deploy == nil || svc == nil || np == nil {
				t.Fatalf("missing objects in %v", sortedKeys(objs))
			}
			spec := dig(deploy, "spec", "template", "spec")
			ctr, _ := spec["containers"].([]any)[0].(map[string]any)
			args := jsonAt(ctr, "args")
			listen := strings.Contains(args, `"--listen=:`+c.port+`"`)
			health := strings.Contains(args, `"--health-listen=:`+c.healthPort+`"`)
			if listen != (c.port != "8443") || health != (c.healthPort != "8081") || strings.Count(args, "listen") != btoi(c.port != "8443")+btoi(c.healthPort != "8081") {
				t.Errorf("args %s for port %s, health port %s", args, c.port, c.healthPort)
			}
			if got := portOf(ctr, "https"); got != c.port {
				t.Errorf("containerPort https = %s, want %s", got, c.port)
			}
			if got := portOf(ctr, "health"); got != c.healthPort {
				t.Errorf("containerPort health = %s, want %s", got, c.healthPort)
			}
			for _, p := range []string{"readinessProbe", "livenessProbe"} {
				if got := portOf(ctr, dig(ctr, p, "httpGet")["port"]); got != c.healthPort {
					t.Errorf("%s port = %s, want %s", p, got, c.healthPort)
				}
			}
			svcPorts, _ := dig(svc, "spec")["ports"].([]any)
			for _, sp := range svcPorts {
				sp, _ := sp.(map[string]any)
				want := map[string]string{"https": c.port, "metrics": c.healthPort}[fmt.Sprint(sp["name"])]
				if got := portOf(ctr, sp["targetPort"]); got != want {
					t.Errorf("Service port %v targets %s, want %s", sp["name"], got, want)
				}
			}
			eq := func(what, got, want string) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %s, want %s", what, got, want)
				}
			}
			eq("Service port", jsonAt(svc, "spec", "ports", 0, "port"), "443")
			eq("NetworkPolicy port", jsonAt(np, "spec", "ingress", 0, "ports", 0, "port"), c.port)
			if c.hostNetwork {
				eq("hostNetwork", jsonAt(spec, "hostNetwork"), "true")
				eq("dnsPolicy", jsonAt(spec, "dnsPolicy"), `"ClusterFirstWithHostNet"`)
			} else {
				eq("hostNetwork", jsonAt(spec, "hostNetwork"), "null")
				eq("dnsPolicy", jsonAt(spec, "dnsPolicy"), "null")
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
