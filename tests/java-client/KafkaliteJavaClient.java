// The Java client (org.apache.kafka:kafka-clients) driven by tests/server/test_server_clients.py against
// `kafkalite serve`: compiled there with javac against the jars tests/java-client/pom.xml fetches.
// It only talks to the server and prints what it saw, one line per fact; the Python test decides
// what is right. Records are printed as "R topic partition offset key value headers" with keys,
// values and header values in hex ("-" for null) and headers as "name=hex" joined by ",".
//
//   admin   BOOTSTRAP TOPIC PARTITIONS     create (twice: the second must fail), list, describe
//   produce BOOTSTRAP TOPIC_PREFIX N CODEC...   N records to TOPIC_PREFIX-CODEC, acks=all
//                                          (-Denable.idempotence=false/true overrides the default)
//   consume BOOTSTRAP GROUP N TOPIC...     subscribe as GROUP, read N records, commitSync
//
// Records number i in 0..N have key "k<i>" (null when i % 3 == 0), value "v<i>" plus 40 x's
// (null when i % 5 == 0) and headers i=<i>, nil=null; test_server_clients.py makes the same ones.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.AdminClient;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaliteJavaClient {
    private static final HexFormat HEX = HexFormat.of();

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "admin" -> admin(args[1], args[2], Integer.parseInt(args[3]));
            case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]), List.of(args).subList(4, args.length));
            case "consume" -> consume(args[1], args[2], Integer.parseInt(args[3]), List.of(args).subList(4, args.length));
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String hex(byte[] b) {
        return b == null ? "-" : HEX.formatHex(b);
    }

    static void admin(String bootstrap, String topic, int partitions) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        try (AdminClient admin = AdminClient.create(props)) {
            NewTopic created = new NewTopic(topic, partitions, (short) 1).configs(Map.of("retention.ms", "3600000"));
            admin.createTopics(List.of(created)).all().get();
            System.out.println("CREATED " + topic);
            try {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
                System.out.println("CREATED-AGAIN " + topic);
            } catch (ExecutionException e) {
                String name = e.getCause() instanceof TopicExistsException ? "TopicExistsException" : e.getCause().toString();
                System.out.println("EXISTS " + name);
            }
            System.out.println("LISTED " + String.join(",", new java.util.TreeSet<>(admin.listTopics().names().get())));
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            System.out.println("DESCRIBED " + d.name() + " " + d.partitions().size() + " leader=" + d.partitions().get(0).leader().id());
            DescribeClusterResult cluster = admin.describeCluster();
            System.out.println("CLUSTER nodes=" + cluster.nodes().get().size() + " controller=" + cluster.controller().get().id());
        }
    }

    static void produce(String bootstrap, String prefix, int n, List<String> codecs) throws Exception {
        for (String codec : codecs) {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("acks", "all");
            props.put("compression.type", codec);
            props.put("linger.ms", "5");
            // -Denable.idempotence=false where the server does not serve InitProducerId (the
            // Java client's default is true since 3.0, and it then refuses to send at all).
            String idempotence = System.getProperty("enable.idempotence");
            if (idempotence != null) {
                props.put("enable.idempotence", idempotence);
            }
            props.put("key.serializer", ByteArraySerializer.class.getName());
            props.put("value.serializer", ByteArraySerializer.class.getName());
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            String topic = prefix + "-" + codec;
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
                for (int i = 0; i < n; i++) {
                    RecordHeaders headers = new RecordHeaders();
                    headers.add("i", utf8(Integer.toString(i)));
                    headers.add("nil", null);
                    byte[] key = i % 3 == 0 ? null : utf8("k" + i);
                    byte[] value = i % 5 == 0 ? null : utf8("v" + i + "x".repeat(40));
                    sent.add(producer.send(new ProducerRecord<>(topic, 0, key, value, headers)));
                }
                producer.flush();
                for (Future<RecordMetadata> f : sent) {
                    RecordMetadata m = f.get();
                    System.out.println("ACK " + m.topic() + " " + m.partition() + " " + m.offset());
                }
            }
        }
    }

    static void consume(String bootstrap, String group, int n, List<String> topics) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        int seen = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(topics);
            while (seen < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    List<String> headers = new ArrayList<>();
                    for (Header h : r.headers()) {
                        headers.add(h.key() + "=" + hex(h.value()));
                    }
                    System.out.println("R " + r.topic() + " " + r.partition() + " " + r.offset() + " "
                            + hex(r.key()) + " " + hex(r.value()) + " " + String.join(",", headers));
                    seen++;
                }
            }
            consumer.commitSync();
            System.out.println("COMMITTED " + seen);
        }
        System.out.flush();
        if (seen < n) {
            System.err.println("only " + seen + " of " + n + " records within 60 s");
            System.exit(2);
        }
    }

    private KafkaliteJavaClient() {}
}
