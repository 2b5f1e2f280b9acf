package gateway

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// serveServerQueries answers the server API's queries of Triton backends
// running in executors (TRITONSERVER_ServerMetadata, ...ModelMetadata,
// ...ModelConfig, ...ModelStatistics, ...ModelIndex) as the gRPC API
// answers a client, so a backend sees what a client of the constellation
// sees. Any one gateway answers each (queue QueueGateways).
func (g *Gateway) serveServerQueries() ([]*bus.Subscription, error) {
	s := &grpcService{g: g}
	handlers := map[string]bus.HandlerFunc{
		bus.ServerMetadataSubject: func(ctx context.Context, data []byte) (proto.Message, error) {
			var req inference.ServerMetadataRequest
			if err := unmarshalQuery(data, &req); err != nil {
				return nil, err
			}
			return s.ServerMetadata(ctx, &req)
		},
		bus.ModelMetadataSubject: func(ctx context.Context, data []byte) (proto.Message, error) {
			var req inference.ModelMetadataRequest
			if err := unmarshalQuery(data, &req); err != nil {
				return nil, err
			}
			return s.ModelMetadata(ctx, &req)
		},
		bus.ModelConfigSubject: func(ctx context.Context, data []byte) (proto.Message, error) {
			var req inference.ModelConfigRequest
			if err := unmarshalQuery(data, &req); err != nil {
				return nil, err
			}
			return s.ModelConfig(ctx, &req)
		},
		bus.ModelStatisticsSubject: func(ctx context.Context, data []byte) (proto.Message, error) {
			var req inference.ModelStatisticsRequest
			if err := unmarshalQuery(data, &req); err != nil {
				return nil, err
			}
			return s.ModelStatistics(ctx, &req)
		},
		bus.RepositoryIndexSubject: func(ctx context.Context, data []byte) (proto.Message, error) {
			var req inference.RepositoryIndexRequest
			if err := unmarshalQuery(data, &req); err != nil {
				return nil, err
			}
			return s.RepositoryIndex(ctx, &req)
		},
	}
	var subs []*bus.Subscription
	for _, subject := range bus.ServerQuerySubjects {
		sub, err := g.bus.Handle(subject, bus.QueueGateways, handlers[subject])
		if err != nil {
			for _, s := range subs {
				_ = s.Unsubscribe()
			}
			return nil, err
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

func unmarshalQuery(data []byte, m proto.Message) error {
	if err := proto.Unmarshal(data, m); err != nil {
		return tritonerr.InvalidArgf("malformed server query: %v", err)
	}
	return nil
}
