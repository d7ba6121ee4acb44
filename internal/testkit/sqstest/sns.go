package sqstest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
)

// fauxqs emulates Amazon SNS too, in the same process and on the same
// port: topics (FIFO ones among them), Publish and PublishBatch, and
// subscriptions of SQS queues, with raw message delivery. A test reads
// what an SNS topic took from the queue CreateTopic subscribes to it.
//
// What it does not do, besides what it does not do for SQS: SNS's own
// limits on a message's attributes (it checks only the body's size),
// throttling, credentials and IAM, and the rule that only FIFO queues
// subscribe to FIFO topics.

// Account is the emulator's account.
const Account = "000000000000"

// TopicARNPrefix is the ARN of the emulator's topics without their name,
// ending in a colon: the relay's SNS_TOPIC_ARN for a topic per row.
const TopicARNPrefix = "arn:aws:sns:" + Region + ":" + Account + ":"

// SNSClient returns an SDK SNS client for the emulator.
func (s *Server) SNSClient() *sns.Client {
	return sns.New(sns.Options{
		Region:       Region,
		Credentials:  Credentials,
		BaseEndpoint: aws.String(s.Endpoint()),
	})
}

// CreateTopic creates SNS topic name (a FIFO topic for a name ending in
// .fifo) and an SQS queue of the same name subscribed to it with raw
// message delivery (the body and the attributes as published), and
// returns the topic's ARN and the queue's URL, which Received reads.
func (s *Server) CreateTopic(t testing.TB, name string) (arn, queueURL string) {
	t.Helper()
	queueURL = s.CreateQueue(t, name, nil)
	s.mu.Lock()
	if s.topics == nil {
		s.topics = map[string]bool{}
	}
	s.topics[name] = true
	s.mu.Unlock()
	arn, err := s.createTopic(name)
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	return arn, queueURL
}

func (s *Server) createTopic(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := s.SNSClient()
	attrs := map[string]string{}
	if filepath.Ext(name) == ".fifo" {
		attrs["FifoTopic"] = "true"
	}
	out, err := cl.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", err
	}
	_, err = cl.Subscribe(ctx, &sns.SubscribeInput{
		TopicArn:   out.TopicArn,
		Protocol:   aws.String("sqs"),
		Endpoint:   aws.String("arn:aws:sqs:" + Region + ":" + Account + ":" + name),
		Attributes: map[string]string{"RawMessageDelivery": "true"},
	})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.TopicArn), nil
}
