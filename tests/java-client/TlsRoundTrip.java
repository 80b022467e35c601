// The Java client (org.apache.kafka:kafka-clients) over TLS against `kafkalite serve`, driven by
// tests/interop/test_server_tls_java.py: the client configuration (security.protocol, PEM trust and key
// stores, SASL) comes from a properties file, so the test decides every setting.
//
//   TlsRoundTrip PROPERTIES TOPIC N   produce N records (acks=all), then read them back from
//                                     offset 0; prints "ACKED n" and "READ n values-in-order",
//                                     or "ERROR <exception classes, outermost first>: <message>"
//                                     and exits 2 when the client fails.

import java.io.FileReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TlsRoundTrip {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileReader in = new FileReader(args[0], StandardCharsets.UTF_8)) {
            props.load(in);
        }
        String topic = args[1];
        int n = Integer.parseInt(args[2]);
        try {
            run(props, topic, n);
        } catch (Exception e) {
            StringBuilder chain = new StringBuilder();
            for (Throwable t = e; t != null; t = t.getCause()) {
                chain.append(chain.length() == 0 ? "" : " <- ").append(t.getClass().getSimpleName());
            }
            System.out.println("ERROR " + chain + ": " + e.getMessage());
            System.exit(2);
        }
    }

    static void run(Properties props, String topic, int n) throws Exception {
        Properties p = new Properties();
        p.putAll(props);
        p.put("acks", "all");
        p.put("max.block.ms", "10000");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("v" + i).getBytes(StandardCharsets.UTF_8))).get();
            }
        }
        System.out.println("ACKED " + n);
        Properties c = new Properties();
        c.putAll(props);
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seek(tp, 0);
            long deadline = System.currentTimeMillis() + 30_000;
            while (got.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
        }
        System.out.println("READ " + got.size() + " " + String.join(",", got));
    }
}
