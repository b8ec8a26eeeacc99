// Package benchstream generates the manifest streams the injector's
// benchmarks read, so that the in-process benchmark (manifests) and the
// process benchmark (bench/injector) measure the same input.
package benchstream

import (
	"bytes"
	"fmt"
)

// Stream is n documents, three in four carrying a pod (Deployments with
// two containers, one of them ruled; Pods with rules), the rest ConfigMaps.
// It returns the stream and its number of pod-bearing documents. With
// podCommand the Pods name their command and the whole stream is
// injectable without a registry; without it they leave the entrypoint to
// the image, so the injector looks it up (answered from its cache after
// the first).
func Stream(n int, podCommand bool) ([]byte, int) {
	command := ""
	if podCommand {
		command = "    command: [\"/worker\"]\n"
	}
	var b bytes.Buffer
	pods := 0
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString("---\n")
		}
		switch i % 4 {
		case 0, 1:
			pods++
			fmt.Fprintf(&b, `apiVersion: apps/v1
kind: Deployment
metadata:
  name: api-%d
  namespace: shop
spec:
  replicas: 3
  selector:
    matchLabels: {app: api-%d}
  template:
    metadata:
      labels: {app: api-%d}
    spec:
      containers:
      - name: api
        image: registry.test/app:1
        command: ["/api", "--port=8080"]
        env:
        - {name: MODE, value: prod}
        resources:
          requests: {cpu: 100m, memory: 64Mi}
          limits: {cpu: 100m, memory: 64Mi}
        restartPolicy: Never
        restartPolicyRules:
        - action: Restart
          exitCodes: {operator: In, values: [42]}
      - name: sidecar
        image: registry.test/app:1
        command: ["/metrics"]
`, i, i, i)
		case 2:
			pods++
			fmt.Fprintf(&b, `apiVersion: v1
kind: Pod
metadata:
  name: worker-%d
spec:
  containers:
  - name: worker
    image: registry.test/app:1
%s    args: ["--queue", "q%d"]
    restartPolicy: OnFailure
    restartPolicyRules:
    - action: Restart
      exitCodes: {operator: NotIn, values: [0, 1]}
`, i, command, i)
		case 3:
			fmt.Fprintf(&b, `apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg-%d
data:
  key: value
`, i)
		}
	}
	return b.Bytes(), pods
}
