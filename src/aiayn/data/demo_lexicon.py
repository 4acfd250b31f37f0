"""Words of the English→German demo corpus (``aiayn.data.demo_corpus``) and their German
inflection: articles, adjective endings, noun forms, noun phrases.

Every entry fixes one translation, so that a generated English sentence has exactly one
German translation: "teacher" is always "Lehrer", "opens" is always "macht ... auf".
Nouns and adjectives carry semantic tags (``person``, ``food``, ``open``...) that the
grammar uses to keep sentences sensible ("reads the letter", not "reads the cow").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

_SLOT = {"inf": 0, "1sg": 1, "3sg": 2, "pl": 3}  # persons: "I"; he, she, nouns; we, they, plurals

# German determiners and adjective endings by case, then gender ("pl" for plural).
_G = ("m", "f", "n", "pl")
DER = {"nom": dict(zip(_G, ("der", "die", "das", "die"))),
       "acc": dict(zip(_G, ("den", "die", "das", "die"))),
       "dat": dict(zip(_G, ("dem", "der", "dem", "den")))}
EIN = {"nom": dict(zip(_G, ("", "e", "", "e"))),  # endings of ein-words: kein, mein, unser...
       "acc": dict(zip(_G, ("en", "e", "", "e"))),
       "dat": dict(zip(_G, ("em", "er", "em", "en")))}
WEAK = {"nom": dict(zip(_G, ("e", "e", "e", "en"))),  # adjectives after der/die/das
        "acc": dict(zip(_G, ("en", "e", "e", "en"))),
        "dat": dict.fromkeys(_G, "en")}
MIXED = {"nom": dict(zip(_G, ("er", "e", "es", "en"))),  # after ein-words
         "acc": dict(zip(_G, ("en", "e", "es", "en"))),
         "dat": dict.fromkeys(_G, "en")}
STRONG = {"nom": dict(zip(_G, ("er", "e", "es", "e"))),  # without determiner, after numbers
          "acc": dict(zip(_G, ("en", "e", "es", "e"))),
          "dat": dict(zip(_G, ("em", "er", "em", "en")))}


@dataclass(frozen=True)
class Noun:
    """A countable noun: English and German singular and plural, German gender and tags.

    ``de_obl`` is the accusative/dative singular of weak (n-declension) masculines:
    "der Junge", "den Jungen".
    """

    en: str
    en_pl: str
    de: str
    de_pl: str
    gender: str  # "m" | "f" | "n"
    tags: frozenset[str]
    de_obl: str = ""

    def form(self, plural: bool, case: str) -> str:
        """The German noun form for number and case ("nom" | "acc" | "dat")."""
        if plural:  # the dative plural adds -n unless the plural ends in -n or -s
            if case == "dat" and not self.de_pl.endswith(("n", "s")):
                return self.de_pl + "n"
            return self.de_pl
        return self.de_obl if (case != "nom" and self.de_obl) else self.de


@dataclass(frozen=True)
class Adjective:
    """English word, German predicative form, German stem for endings, order rank, tags.

    ``rank`` orders stacked adjectives as English does: 0 quality, 1 size, 2 age, 3 colour.
    """

    en: str
    de: str
    stem: str
    rank: int
    tags: frozenset[str]


@dataclass(frozen=True)
class Det:
    """A determiner: kind ("def", "indef", "no", "poss", "bare", "num"), English, German stem."""

    kind: str
    en: str
    de: str


@dataclass(frozen=True)
class NounPhrase:
    """A noun phrase in a German case: "einen großen Hund"; ``en`` and ``de`` render it."""

    det: Det
    adjectives: tuple[Adjective, ...]
    noun: Noun
    plural: bool
    case: str = "nom"

    @property
    def person(self) -> str:
        return "pl" if self.plural else "3sg"

    @property
    def tags(self) -> frozenset[str]:
        return self.noun.tags

    @property
    def en(self) -> str:
        words = [a.en for a in self.adjectives] + [self.noun.en_pl if self.plural else self.noun.en]
        if self.det.kind == "indef":
            return ("an " if words[0][0] in "aeiou" else "a ") + " ".join(words)
        return " ".join([self.det.en, *words] if self.det.en else words)

    @property
    def de(self) -> str:
        g = "pl" if self.plural else self.noun.gender
        if self.det.kind == "def":
            article, endings = DER[self.case][g], WEAK
        elif self.det.kind in ("bare", "num"):
            article, endings = self.det.de, STRONG
        else:
            article, endings = self.det.de + EIN[self.case][g], MIXED
        adjectives = [a.stem + endings[self.case][g] for a in self.adjectives]
        words = [article, *adjectives, self.noun.form(self.plural, self.case)]
        return " ".join(w for w in words if w)


@dataclass(frozen=True)
class PrepPhrase:
    """"in the garden" -> "im Garten", "with the dogs" -> "mit den Hunden" (dative)."""

    en_prep: str
    de_prep: str
    np: NounPhrase

    @property
    def en(self) -> str:
        return f"{self.en_prep} {self.np.en}"

    @property
    def de(self) -> str:
        de = f"{self.de_prep} {self.np.de}"
        return "im " + de[len("in dem "):] if de.startswith("in dem ") else de


@dataclass(frozen=True)
class Verb:
    """A verb with its frame and selectional tags.

    ``en`` and ``de`` are (infinitive, 1sg, 3sg, pl) forms; a separable German verb keeps
    its prefix apart (``prefix="auf"``, ``de=("machen", "mache", "macht", "machen")``).
    frame: "intr" (S V), "trans" (S V O; O in ``case``), "ditrans" (S V IO:dat DO:acc),
    "copula" (S is ADJ), "report" (S V that CLAUSE) or "modal" (S V VERB).
    """

    en: tuple[str, str, str, str]
    de: tuple[str, str, str, str]
    frame: str
    subj: frozenset[str]
    obj: frozenset[str] = frozenset()
    io: frozenset[str] = frozenset()
    case: str = "acc"
    prefix: str = ""

    def en_form(self, person: str) -> str:
        """English present form for ``person`` ("inf" gives the bare infinitive)."""
        return self.en[_SLOT[person]]

    def de_form(self, person: str) -> str:
        """German present form without the separable prefix ("inf": the infinitive stem)."""
        return self.de[_SLOT[person]]

    @property
    def de_infinitive(self) -> str:
        """The full German infinitive, prefix included: "aufmachen"."""
        return self.prefix + self.de[0]

    @property
    def group(self) -> str:
        """Sampling group: intr, trans, dative, separable, ditrans, copula or report."""
        if self.prefix:
            return "separable"
        return "dative" if (self.frame == "trans" and self.case == "dat") else self.frame


@dataclass(frozen=True)
class Pronoun:
    """A subject pronoun (nominative only)."""

    en: str
    de: str
    person: str
    tags: frozenset[str] = frozenset({"person"})


@dataclass(frozen=True)
class Lexicon:
    """All word lists the grammar draws from. ``subset`` makes small lexicons for tests."""

    nouns: tuple[Noun, ...]
    adjectives: tuple[Adjective, ...]
    verbs: tuple[Verb, ...]
    modals: tuple[Verb, ...]
    pronouns: tuple[Pronoun, ...]
    possessives: tuple[tuple[str, str], ...]  # ("my", "mein"): ein-words
    numbers: tuple[tuple[str, str], ...]  # ("two", "zwei")
    adverbials: tuple[tuple[str, str], ...]  # ("On Monday", "Am Montag")
    conjunctions: tuple[tuple[str, str], ...]  # ("because", "weil")

    def subset(self, keep: set[str]) -> Lexicon:
        """The entries whose English (the infinitive, for verbs) is in ``keep``."""

        def english(x: object) -> str:
            en = x[0] if isinstance(x, tuple) else x.en
            return en[0] if isinstance(en, tuple) else en

        fields = ("nouns", "adjectives", "verbs", "modals", "pronouns", "possessives",
                  "numbers", "adverbials", "conjunctions")
        return replace(self, **{f: tuple(x for x in getattr(self, f) if english(x) in keep)
                                for f in fields})


def _tags(s: str) -> frozenset[str]:
    return frozenset(s.split())


def _rows(table: str) -> list[list[str]]:
    return [row.split() for row in table.replace(";", "\n").split("\n") if row.strip()]


# By tags: "English sg and pl, German sg and pl, gender[, weak-noun oblique form]".
_NOUNS = {
    "person": """man men Mann Männer m; woman women Frau Frauen f; child children Kind Kinder n;
        boy boys Junge Jungen m Jungen; girl girls Mädchen Mädchen n;
        teacher teachers Lehrer Lehrer m; doctor doctors Arzt Ärzte m;
        student students Student Studenten m Studenten; friend friends Freund Freunde m;
        neighbour neighbours Nachbar Nachbarn m Nachbarn; sister sisters Schwester Schwestern f;
        brother brothers Bruder Brüder m; grandmother grandmothers Großmutter Großmütter f;
        grandfather grandfathers Großvater Großväter m; uncle uncles Onkel Onkel m;
        aunt aunts Tante Tanten f; baker bakers Bäcker Bäcker m""",
    "animal": """dog dogs Hund Hunde m; cat cats Katze Katzen f; horse horses Pferd Pferde n;
        bird birds Vogel Vögel m; mouse mice Maus Mäuse f; cow cows Kuh Kühe f;
        duck ducks Ente Enten f; rabbit rabbits Kaninchen Kaninchen n;
        elephant elephants Elefant Elefanten m Elefanten; bear bears Bär Bären m Bären""",
    "thing": """car cars Auto Autos n; table tables Tisch Tische m; chair chairs Stuhl Stühle m;
        ball balls Ball Bälle m; key keys Schlüssel Schlüssel m; cup cups Tasse Tassen f;
        bicycle bicycles Fahrrad Fahrräder n; picture pictures Bild Bilder n;
        pot pots Topf Töpfe m; plate plates Teller Teller m; spoon spoons Löffel Löffel m;
        clock clocks Uhr Uhren f; umbrella umbrellas Regenschirm Regenschirme m;
        tree trees Baum Bäume m; flower flowers Blume Blumen f""",
    "thing open": """door doors Tür Türen f; window windows Fenster Fenster n;
        box boxes Kiste Kisten f; bag bags Tasche Taschen f; bottle bottles Flasche Flaschen f""",
    "thing device": """lamp lamps Lampe Lampen f; radio radios Radio Radios n;
        computer computers Computer Computer m""",
    "thing clothes": """coat coats Mantel Mäntel m; hat hats Hut Hüte m;
        shoe shoes Schuh Schuhe m; jacket jackets Jacke Jacken f; dress dresses Kleid Kleider n""",
    "thing text open": "book books Buch Bücher n",
    "text open": "letter letters Brief Briefe m",
    "text": "newspaper newspapers Zeitung Zeitungen f; poem poems Gedicht Gedichte n",
    "text tale": "story stories Geschichte Geschichten f",
    "food": """apple apples Apfel Äpfel m; cake cakes Kuchen Kuchen m; egg eggs Ei Eier n;
        banana bananas Banane Bananen f; pear pears Birne Birnen f;
        tomato tomatoes Tomate Tomaten f; potato potatoes Kartoffel Kartoffeln f;
        sausage sausages Wurst Würste f; carrot carrots Karotte Karotten f""",
    "thing place": "house houses Haus Häuser n",
    "place": """garden gardens Garten Gärten m; park parks Park Parks m;
        kitchen kitchens Küche Küchen f; city cities Stadt Städte f;
        school schools Schule Schulen f; room rooms Zimmer Zimmer n; office offices Büro Büros n;
        village villages Dorf Dörfer n; forest forests Wald Wälder m;
        shop shops Laden Läden m""",
}
_SIMPLE_NOUNS = {row[0]: Noun(*row[:5], _tags(tags), *row[5:])
                 for tags, entries in _NOUNS.items() for row in _rows(entries)}

# Compounds: English modifier + head noun. German: combining form + head in lower case,
# with the head's gender, plural and tags: "house door" -> "Haustür", plural "Haustüren".
_COMBINING = {
    "house": "Haus", "garden": "Garten", "kitchen": "Küchen", "car": "Auto",
    "apple": "Apfel", "coffee": "Kaffee", "water": "Wasser", "flower": "Blumen",
    "picture": "Bilder", "school": "Schul", "tree": "Baum", "bicycle": "Fahrrad",
    "birthday": "Geburtstags", "city": "Stadt",
}
_COMPOUNDS = """house door, garden door, kitchen door, car door, kitchen window, apple tree,
    house key, car key, bicycle key, kitchen table, kitchen lamp, school bag, coffee cup,
    water bottle, flower pot, apple cake, birthday cake, picture book, school book, tree house,
    city park, school garden"""


def compound(modifier: str, head: Noun) -> Noun:
    """The compound noun "modifier head": compound("apple", tree) -> "Apfelbaum"."""
    de = _COMBINING[modifier]
    return Noun(f"{modifier} {head.en}", f"{modifier} {head.en_pl}", de + head.de.lower(),
                de + head.de_pl.lower(), head.gender, head.tags)


# English, German predicative, German stem, rank (0 quality, 1 size, 2 age, 3 colour), tags
_ADJECTIVES = """
    beautiful schön schön 0 person+animal+thing+place
    friendly freundlich freundlich 0 person+animal
    funny lustig lustig 0 person+animal+text; clever klug klug 0 person+animal
    lazy faul faul 0 person+animal; tired müde müd 0 person+animal
    hungry hungrig hungrig 0 person+animal; happy glücklich glücklich 0 person+animal
    quiet ruhig ruhig 0 person+place; expensive teuer teur 0 thing; cheap billig billig 0 thing
    clean sauber sauber 0 thing+place; dirty schmutzig schmutzig 0 thing+place+animal
    heavy schwer schwer 0 thing; dark dunkel dunkl 0 place; fresh frisch frisch 0 food
    sweet süß süß 0 food; boring langweilig langweilig 0 text
    interesting interessant interessant 0 text; long lang lang 1 text
    big groß groß 1 person+animal+thing+text+food+place
    small klein klein 1 person+animal+thing+text+food+place
    old alt alt 2 person+animal+thing+text+place; new neu neu 2 thing+text+place
    young jung jung 2 person+animal; red rot rot 3 thing+food
    black schwarz schwarz 3 thing+animal
    white weiß weiß 3 thing+animal; green grün grün 3 thing+food; blue blau blau 3 thing
    brown braun braun 3 thing+animal; yellow gelb gelb 3 thing+food"""

_P, _PA = _tags("person"), _tags("person animal")


def _v(en: str, en3: str, de: str, de1: str, de3: str, frame: str, subj: frozenset[str],
       obj: str = "", **kw: object) -> Verb:
    return Verb((en, en, en3, en), (de, de1, de3, de), frame, subj, _tags(obj), **kw)


_VERBS = [
    _v("sleep", "sleeps", "schlafen", "schlafe", "schläft", "intr", _PA),
    _v("play", "plays", "spielen", "spiele", "spielt", "intr", _PA),
    _v("work", "works", "arbeiten", "arbeite", "arbeitet", "intr", _P),
    _v("wait", "waits", "warten", "warte", "wartet", "intr", _PA),
    _v("laugh", "laughs", "lachen", "lache", "lacht", "intr", _P),
    _v("sing", "sings", "singen", "singe", "singt", "intr", _PA),
    _v("dance", "dances", "tanzen", "tanze", "tanzt", "intr", _P),
    _v("swim", "swims", "schwimmen", "schwimme", "schwimmt", "intr", _PA),
    _v("go shopping", "goes shopping", "kaufen", "kaufe", "kauft", "intr", _P, prefix="ein"),
    _v("get up", "gets up", "stehen", "stehe", "steht", "intr", _PA, prefix="auf"),
    _v("come back", "comes back", "kommen", "komme", "kommt", "intr", _PA, prefix="zurück"),
    _v("come along", "comes along", "kommen", "komme", "kommt", "intr", _PA, prefix="mit"),
    _v("see", "sees", "sehen", "sehe", "sieht", "trans", _PA,
       "person animal thing text food place"),
    _v("buy", "buys", "kaufen", "kaufe", "kauft", "trans", _P, "animal thing text food"),
    _v("read", "reads", "lesen", "lese", "liest", "trans", _P, "text"),
    _v("write", "writes", "schreiben", "schreibe", "schreibt", "trans", _P, "text"),
    _v("eat", "eats", "essen", "esse", "isst", "trans", _P, "food"),
    _v("cook", "cooks", "kochen", "koche", "kocht", "trans", _P, "food"),
    _v("find", "finds", "finden", "finde", "findet", "trans", _PA,
       "person animal thing text food"),
    _v("love", "loves", "lieben", "liebe", "liebt", "trans", _PA, "person animal"),
    _v("visit", "visits", "besuchen", "besuche", "besucht", "trans", _P, "person place"),
    _v("wash", "washes", "waschen", "wasche", "wäscht", "trans", _P, "person animal thing"),
    _v("carry", "carries", "tragen", "trage", "trägt", "trans", _P, "animal thing text food"),
    _v("paint", "paints", "malen", "male", "malt", "trans", _P,
       "person animal thing food place"),
    _v("need", "needs", "brauchen", "brauche", "braucht", "trans", _PA, "thing text food"),
    _v("look for", "looks for", "suchen", "suche", "sucht", "trans", _PA,
       "person animal thing text"),
    _v("clean", "cleans", "putzen", "putze", "putzt", "trans", _P, "thing place"),
    _v("know", "knows", "kennen", "kenne", "kennt", "trans", _PA, "person animal place"),
    _v("hear", "hears", "hören", "höre", "hört", "trans", _PA, "person animal device"),
    _v("help", "helps", "helfen", "helfe", "hilft", "trans", _PA, "person animal", case="dat"),
    _v("thank", "thanks", "danken", "danke", "dankt", "trans", _P, "person", case="dat"),
    _v("follow", "follows", "folgen", "folge", "folgt", "trans", _PA, "person animal",
       case="dat"),
    _v("answer", "answers", "antworten", "antworte", "antwortet", "trans", _P, "person",
       case="dat"),
    _v("open", "opens", "machen", "mache", "macht", "trans", _P, "open", prefix="auf"),
    _v("close", "closes", "machen", "mache", "macht", "trans", _P, "open", prefix="zu"),
    _v("switch on", "switches on", "schalten", "schalte", "schaltet", "trans", _P, "device",
       prefix="ein"),
    _v("switch off", "switches off", "schalten", "schalte", "schaltet", "trans", _P, "device",
       prefix="aus"),
    _v("put on", "puts on", "ziehen", "ziehe", "zieht", "trans", _P, "clothes", prefix="an"),
    _v("take off", "takes off", "ziehen", "ziehe", "zieht", "trans", _P, "clothes", prefix="aus"),
    _v("call", "calls", "rufen", "rufe", "ruft", "trans", _P, "person", prefix="an"),
    _v("pick up", "picks up", "holen", "hole", "holt", "trans", _P, "person", prefix="ab"),
    _v("invite", "invites", "laden", "lade", "lädt", "trans", _P, "person", prefix="ein"),
    _v("tidy up", "tidies up", "räumen", "räume", "räumt", "trans", _P, "place", prefix="auf"),
    _v("bring back", "brings back", "bringen", "bringe", "bringt", "trans", _P, "thing text",
       prefix="zurück"),
    _v("give", "gives", "geben", "gebe", "gibt", "ditrans", _P, "thing text food", io=_PA),
    _v("show", "shows", "zeigen", "zeige", "zeigt", "ditrans", _P, "animal thing text", io=_P),
    _v("bring", "brings", "bringen", "bringe", "bringt", "ditrans", _P, "thing text food", io=_PA),
    _v("send", "sends", "schicken", "schicke", "schickt", "ditrans", _P, "thing text food", io=_P),
    _v("tell", "tells", "erzählen", "erzähle", "erzählt", "ditrans", _P, "tale", io=_P),
    Verb(("be", "am", "is", "are"), ("sein", "bin", "ist", "sind"), "copula",
         _tags("person animal thing text food place")),
    _v("say", "says", "sagen", "sage", "sagt", "report", _P),
    Verb(("know", "know", "knows", "know"), ("wissen", "weiß", "weiß", "wissen"), "report", _P),
    _v("think", "thinks", "denken", "denke", "denkt", "report", _P),
    _v("hope", "hopes", "hoffen", "hoffe", "hofft", "report", _P),
    _v("believe", "believes", "glauben", "glaube", "glaubt", "report", _P),
]

_MODALS = [
    _v("want to", "wants to", "wollen", "will", "will", "modal", _P),
    _v("can", "can", "können", "kann", "kann", "modal", _P),
    _v("must", "must", "müssen", "muss", "muss", "modal", _P),
    _v("should", "should", "sollen", "soll", "soll", "modal", _P),
    Verb(("be allowed to", "am allowed to", "is allowed to", "are allowed to"),
         ("dürfen", "darf", "darf", "dürfen"), "modal", _P),
    _v("would like to", "would like to", "möchten", "möchte", "möchte", "modal", _P),
]

_ADVERBIALS = [
    ("Today", "Heute"), ("Tomorrow", "Morgen"), ("Now", "Jetzt"), ("Often", "Oft"),
    ("Sometimes", "Manchmal"), ("Usually", "Normalerweise"), ("Later", "Später"),
    ("Soon", "Bald"), ("Unfortunately", "Leider"), ("Every day", "Jeden Tag"),
    ("In the morning", "Am Morgen"), ("In the evening", "Am Abend"),
    ("At night", "In der Nacht"), ("After school", "Nach der Schule"),
    ("On Monday", "Am Montag"), ("On Tuesday", "Am Dienstag"), ("On Wednesday", "Am Mittwoch"),
    ("On Thursday", "Am Donnerstag"), ("On Friday", "Am Freitag"),
    ("On Saturday", "Am Samstag"), ("On Sunday", "Am Sonntag"),
]

DEFAULT_LEXICON = Lexicon(
    nouns=tuple(_SIMPLE_NOUNS.values())
    + tuple(compound(m, _SIMPLE_NOUNS[h]) for m, h in map(str.split, _COMPOUNDS.split(","))),
    adjectives=tuple(Adjective(e, d, s, int(r), frozenset(t.split("+")))
                     for e, d, s, r, t in _rows(_ADJECTIVES)),
    verbs=tuple(_VERBS),
    modals=tuple(_MODALS),
    pronouns=tuple(Pronoun(en, de, p) for en, de, p in _rows(
        "I ich 1sg; he er 3sg; she sie 3sg; we wir pl; they sie pl")),
    possessives=(("my", "mein"), ("our", "unser"), ("his", "sein"), ("her", "ihr")),
    numbers=(("two", "zwei"), ("three", "drei"), ("four", "vier"), ("five", "fünf"),
             ("six", "sechs"), ("seven", "sieben"), ("eight", "acht"), ("nine", "neun"),
             ("ten", "zehn"), ("eleven", "elf"), ("twelve", "zwölf")),
    adverbials=tuple(_ADVERBIALS),
    conjunctions=(("because", "weil"), ("although", "obwohl"), ("while", "während"),
                  ("when", "wenn"), ("before", "bevor")),
)
