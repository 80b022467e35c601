// eos: franz-go's GroupTransactSession doing consume-transform-produce, for
// tests/test_server_go_transactions.py. It writes COUNT records to IN, then, as a
// member of GROUP (on the consumer protocol, KIP-848, or the classic one), reads them
// read_committed and, in transactions, writes "out-<value>" to OUT for each and
// commits the group's offsets with them (TxnOffsetCommit naming the member and its
// epoch or generation). It prints "DONE <records> <aborted ends>" once every input
// record went through a committed transaction.
//
// Usage: eos BOOTSTRAP IN OUT GROUP consumer|classic COUNT
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) != 7 {
		fail("usage: eos BOOTSTRAP IN OUT GROUP consumer|classic COUNT")
	}
	bootstrap, in, out, group, protocol := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	count, err := strconv.Atoi(os.Args[6])
	if err != nil {
		fail("COUNT: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	producer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		fail("client: %v", err)
	}
	records := make([]*kgo.Record, count)
	for i := range records {
		records[i] = &kgo.Record{Topic: in, Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
	}
	if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
		fail("producing the input: %v", err)
	}
	producer.Close()

	opts := []kgo.Opt{
		kgo.SeedBrokers(bootstrap),
		kgo.TransactionalID("eos-" + group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequireStableFetchOffsets(),
	}
	switch protocol {
	case "consumer":
		// KIP-848: the coordinator assigns; franz-go needs the range or sticky balancer for it.
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
	case "classic":
	default:
		fail("protocol must be consumer or classic, not %q", protocol)
	}
	session, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		fail("session: %v", err)
	}
	defer session.Close()

	done, aborted := 0, 0
	for done < count {
		fetches := session.PollFetches(ctx)
		if ctx.Err() != nil {
			fail("timed out with %d of %d records committed (%d ends aborted)", done, count, aborted)
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			fmt.Fprintf(os.Stderr, "fetch error %s-%d: %v\n", topic, partition, err)
		})
		if err := session.Begin(); err != nil {
			fail("begin: %v", err)
		}
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			session.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: append([]byte("out-"), r.Value...)}, nil)
		})
		committed, err := session.End(ctx, kgo.TryCommit)
		if err != nil {
			fail("end: %v", err)
		}
		if committed {
			done += n
		} else {
			aborted++
		}
	}
	fmt.Printf("DONE %d %d\n", done, aborted)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "eos: "+format+"\n", args...)
	os.Exit(1)
}
