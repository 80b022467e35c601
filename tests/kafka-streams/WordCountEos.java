// Kafka Streams word count with processing.guarantee=exactly_once_v2 against `kafkalite serve`
// (tests/interop/test_server_streams_eos.py): reads lines from `args[1]`, writes (word, count) to
// `args[2]`, and stops (a clean close: the last transaction committed) when its stdin ends, which
// the test closes once it reads the exact counts, or after `args[3]` ms (prints TIMEOUT); prints
// RUNNING when the application reached RUNNING and DONE at the end.

import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;

public class WordCountEos {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], stateDir = args[4];
        long timeoutMs = Long.parseLong(args[3]);
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "kafkalite-wordcount");
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        // A run started after a kill -9 waits for the killed member's session to expire before
        // the group rebalances: 10 s rather than Streams' 45 s (heartbeats every second).
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10_000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1_000);
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> lines = builder.stream(input);
        lines.flatMapValues(v -> Arrays.asList(v.toLowerCase().split("\\s+")))
            .groupBy((k, w) -> w)
            .count()
            .toStream()
            .mapValues(Object::toString)
            .to(output, Produced.with(Serdes.String(), Serdes.String()));
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) System.out.println("RUNNING");
        });
        CountDownLatch stdinEnded = new CountDownLatch(1);
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() != -1) {}
            } catch (java.io.IOException e) {
                // a closed stdin ends the run as its end does
            }
            stdinEnded.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();
        streams.start();
        if (!stdinEnded.await(timeoutMs, TimeUnit.MILLISECONDS)) {
            System.out.println("TIMEOUT " + streams.state());
        }
        streams.close(Duration.ofSeconds(20));
        System.out.println("DONE " + streams.state());
        System.exit(0);
    }
}
