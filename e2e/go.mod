module github.com/nereid-io/nereid/e2e

go 1.26.0

require (
	github.com/nereid-io/nereid/api v0.0.0
	github.com/nereid-io/nereid/pkg v0.0.0
	github.com/nereid-io/nereid/services/standalone v0.0.0
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nats-server/v2 v2.15.2 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/nereid-io/nereid/api => ../api
	github.com/nereid-io/nereid/pkg => ../pkg
	github.com/nereid-io/nereid/services/executor => ../services/executor
	github.com/nereid-io/nereid/services/gateway => ../services/gateway
	github.com/nereid-io/nereid/services/sequence-router => ../services/sequence-router
	github.com/nereid-io/nereid/services/shm-registry => ../services/shm-registry
	github.com/nereid-io/nereid/services/standalone => ../services/standalone
)
