"""Generate the bundled demo dataset: a network of European city libraries (CC0-1.0).

Writes three files next to this script (or into ``--out``):

* ``kg.ttl``        ontology (``do:``) and instances of libraries, librarians, authors, books,
                    publishers, genres, awards, cities, countries and library holdings;
* ``questions.yml`` questions in the TEXT2SPARQL YAML format, grouped in template families;
* ``splits.yml``    a family-stratified train/validation/test assignment.

The graph is deliberately messy the way real knowledge graphs are: people are named with
``do:name`` while everything else uses ``rdfs:label``; person and city IRIs are percent-encoded
UTF-8; city labels come in two languages; optional properties are missing for some entities;
a few books have two authors. A fixed set of *anchor* entities carries every fact a question
depends on; seeded random *filler* entities make the graph realistically sized.

Stdlib only and deterministic: ``python generate.py`` twice gives byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

SEED = 2026
SPLIT_SEED = 0
ONT = "http://demo.sparql-researcher.org/ontology/"
RES = "http://demo.sparql-researcher.org/resource/"
DATASET_ID = "https://demo.sparql-researcher.org/2026/libraries/"
DATASET_PREFIX = "demo"

RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
XSD = "http://www.w3.org/2001/XMLSchema#"
OWL = "http://www.w3.org/2002/07/owl#"


class GenerationError(Exception):
    """The anchor data or the question specs are inconsistent (a bug in this file)."""


# --------------------------------------------------------------------------------------------
# Ontology
# --------------------------------------------------------------------------------------------

# (local name, label, comment, superclass)
CLASSES: tuple[tuple[str, str, str, str | None], ...] = (
    ("Person", "person", "A human being; named with do:name, not rdfs:label.", None),
    ("Author", "author", "A person known as a writer (some have no book in this graph).", "Person"),
    ("Librarian", "librarian", "A person employed by a library.", "Person"),
    ("Book", "book", "A published work (all editions together).", None),
    ("Publisher", "publisher", "A publishing house.", None),
    ("Library", "library", "A public library (one building).", None),
    ("Holding", "holding", "The copies of one book kept by one library.", None),
    ("Genre", "genre", "A literary genre.", None),
    ("Award", "award", "A literary prize.", None),
    ("City", "city", "A city or town.", None),
    ("Country", "country", "A sovereign country.", None),
)

# (local name, kind, label, domain, range, comment); range is a class local name or an xsd type
PROPERTIES: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("author", "object", "author", "Book", "Author", "An author of the book."),
    ("publishedBy", "object", "published by", "Book", "Publisher", "The publisher of the book."),
    ("genre", "object", "genre", "Book", "Genre", "A genre of the book."),
    ("bornIn", "object", "born in", "Person", "City", "The city where the person was born."),
    ("nationality", "object", "nationality", "Person", "Country", "A citizenship of the person."),
    ("receivedAward", "object", "received award", "Author", "Award", "A prize the author won."),
    ("worksAt", "object", "works at", "Librarian", "Library", "The library employing the librarian."),
    ("headLibrarian", "object", "head librarian", "Library", "Librarian", "Who directs the library."),
    ("locatedIn", "object", "located in", "Library", "City", "The city of the library."),
    ("headquarteredIn", "object", "headquartered in", "Publisher", "City", "The publisher's seat."),
    ("inCountry", "object", "in country", "City", "Country", "The country of the city."),
    ("heldBy", "object", "held by", "Holding", "Library", "The library keeping the copies."),
    ("ofBook", "object", "of book", "Holding", "Book", "The book the copies are of."),
    ("name", "datatype", "name", "Person", "xsd:string", "Full name of a person."),
    ("honorific", "datatype", "honorific", "Person", "xsd:string", "Title such as Dr. or Prof."),
    ("birthDate", "datatype", "birth date", "Person", "xsd:date", "Date of birth."),
    ("deathDate", "datatype", "death date", "Person", "xsd:date", "Date of death."),
    ("email", "datatype", "email", "Librarian", "xsd:string", "Work e-mail address."),
    ("publicationYear", "datatype", "publication year", "Book", "xsd:integer", "Year of first publication."),
    ("pageCount", "datatype", "page count", "Book", "xsd:integer", "Number of pages of the first edition."),
    ("isbn", "datatype", "ISBN", "Book", "xsd:string", "ISBN-13 of the first edition."),
    ("language", "datatype", "language", "Book", "xsd:string", "ISO 639-1 code of the original language."),
    ("rating", "datatype", "rating", "Book", "xsd:decimal", "Average reader rating, 1 to 5."),
    ("population", "datatype", "population", "City", "xsd:integer", "Number of inhabitants."),
    ("countryCode", "datatype", "country code", "Country", "xsd:string", "ISO 3166-1 alpha-2 code."),
    ("foundingYear", "datatype", "founding year", "Library", "xsd:integer", "Year the library or publisher was founded."),
    ("openingDate", "datatype", "opening date", "Library", "xsd:date", "Opening date of the current building."),
    ("copies", "datatype", "copies", "Holding", "xsd:integer", "Number of copies the library owns."),
    ("loanCount", "datatype", "loan count", "Holding", "xsd:integer", "Loans of these copies in 2025."),
    ("prizeMoney", "datatype", "prize money", "Award", "xsd:decimal", "Prize money in EUR."),
)

# foundingYear is also used by publishers and awards: real vocabularies reuse properties
# beyond their declared domain, and linkers must cope with that.


# --------------------------------------------------------------------------------------------
# Anchor data: every fact a question depends on lives here
# --------------------------------------------------------------------------------------------

# code: (English label, language code)
COUNTRIES: dict[str, tuple[str, str]] = {
    "DE": ("Germany", "de"), "FR": ("France", "fr"), "NO": ("Norway", "nb"), "SE": ("Sweden", "sv"),
    "DK": ("Denmark", "da"), "IS": ("Iceland", "is"), "PT": ("Portugal", "pt"), "ES": ("Spain", "es"),
    "PL": ("Poland", "pl"), "NG": ("Nigeria", "en"), "IT": ("Italy", "it"), "NL": ("Netherlands", "nl"),
}

# native name (IRI): (country, English label or None, population or None)
CITIES: dict[str, tuple[str, str | None, int | None]] = {
    "Berlin": ("DE", None, 3755251), "München": ("DE", "Munich", 1512491),
    "Hamburg": ("DE", None, 1892122), "Paris": ("FR", None, 2102650), "Lyon": ("FR", None, 522250),
    "Oslo": ("NO", None, 709037), "Bergen": ("NO", None, 291940),
    "Stockholm": ("SE", None, 984748), "Göteborg": ("SE", "Gothenburg", 604616),
    "Malmö": ("SE", None, 362133), "København": ("DK", "Copenhagen", 660842),
    "Aarhus": ("DK", None, 367095), "Reykjavík": ("IS", None, 139875),
    "Lisboa": ("PT", "Lisbon", 545923), "Porto": ("PT", None, 231800),
    "Madrid": ("ES", None, 3332035), "Sevilla": ("ES", "Seville", 681998),
    "Kraków": ("PL", None, 804237), "Warszawa": ("PL", "Warsaw", 1861975),
    "Lagos": ("NG", None, 15388000), "Enugu": ("NG", None, None),
    "Roma": ("IT", "Rome", 2749031), "Bologna": ("IT", None, 390734),
    "Amsterdam": ("NL", None, 931298), "Utrecht": ("NL", None, None),
}

# label: (city, founding year, opening date or None, label language or None)
LIBRARIES: dict[str, tuple[str, int, str | None, str | None]] = {
    "Berlin Central Library": ("Berlin", 1901, "1954-09-17", "en"),
    "Munich City Library": ("München", 1843, "1989-11-08", "en"),
    "Hamburg Public Library": ("Hamburg", 1899, None, "en"),
    "Deichman Oslo": ("Oslo", 1785, "2020-06-18", None),
    "Bergen Public Library": ("Bergen", 1874, "1917-04-12", "en"),
    "Stockholm City Library": ("Stockholm", 1928, "1928-03-31", "en"),
    "Gothenburg City Library": ("Göteborg", 1967, None, "en"),
    "Copenhagen Main Library": ("København", 1885, "1993-05-03", "en"),
    "Reykjavík City Library": ("Reykjavík", 1923, None, "en"),
    "Lisbon Municipal Library": ("Lisboa", 1931, "1970-10-02", "en"),
    "Porto Municipal Library": ("Porto", 1833, None, "en"),
    "Kraków Public Library": ("Kraków", 1948, "2001-02-20", "en"),
    "Lagos State Library": ("Lagos", 1977, "1999-07-01", "en"),
    "Archiginnasio Library": ("Bologna", 1801, None, "en"),
    "Amsterdam Public Library": ("Amsterdam", 1919, "2007-07-07", "en"),
    "Bibliothèque municipale de Lyon": ("Lyon", 1692, "1972-01-15", "fr"),
}

# label: (city, founding year)
PUBLISHERS: dict[str, tuple[str, int]] = {
    "Nordlys Forlag": ("Oslo", 1921), "Suhrbach Verlag": ("Berlin", 1950),
    "Elbe & Söhne": ("Hamburg", 1888), "Maison Lumière": ("Paris", 1912),
    "Éditions du Rhône": ("Lyon", 1975), "Forlaget Havn": ("København", 1932),
    "Bjartur & Co": ("Reykjavík", 1989), "Edições Atlântico": ("Lisboa", 1946),
    "Livraria Douro": ("Porto", 1904), "Wydawnictwo Wisła": ("Kraków", 1957),
    "Lagoon Press": ("Lagos", 2003), "Casa Editrice Felsina": ("Bologna", 1961),
    "Uitgeverij Grachten": ("Amsterdam", 1998), "Svea Böcker": ("Stockholm", 2011),
    "Editorial Guadalquivir": ("Sevilla", 1979), "Norrland Press": ("Göteborg", 1994),
}

# slug: (label, sampling weight for filler books)
GENRES: dict[str, tuple[str, int]] = {
    "crime": ("Crime", 18), "poetry": ("Poetry", 8), "scifi": ("Science Fiction", 10),
    "historical": ("Historical Fiction", 14), "biography": ("Biography", 7),
    "children": ("Children's Literature", 8), "fantasy": ("Fantasy", 9), "essay": ("Essays", 6),
    "travel": ("Travel Writing", 7), "romance": ("Romance", 9),
}

# label: (prize money EUR, founding year or None)
AWARDS: dict[str, tuple[str, int | None]] = {
    "Aurora Prize for Fiction": ("50000.00", 1962), "Golden Quill Award": ("15000.00", 1978),
    "European Debut Prize": ("10000.00", None), "Baltic Poetry Medal": ("8000.00", 1991),
    "Saga Prize": ("25000.00", 1955), "Lusitania Award": ("20000.00", None),
    "Harmattan Prize": ("12000.00", 2005),
}


@dataclass
class PersonSpec:
    name: str
    country: str
    born_in: str | None
    birth: str | None
    death: str | None = None
    honorific: str | None = None
    roles: tuple[str, ...] = ("Author",)
    works_at: str | None = None
    email: bool = True
    awards: tuple[str, ...] = ()


ANCHOR_PEOPLE: tuple[PersonSpec, ...] = (
    PersonSpec("Zoë Müller", "DE", "Hamburg", "1978-03-14", awards=("Golden Quill Award",)),
    PersonSpec("Hans Müller", "DE", "München", "1941-11-02"),
    PersonSpec("Lars Ødegaard", "NO", "Bergen", "1965-06-30", awards=("Aurora Prize for Fiction",)),
    PersonSpec("Björk Sigurðardóttir", "IS", "Reykjavík", "1982-01-21", awards=("Baltic Poetry Medal", "Saga Prize")),
    PersonSpec("José Almeida", "PT", "Porto", "1950-08-09", awards=("Lusitania Award",)),
    PersonSpec("Anna Berg", "SE", "Malmö", "1990-05-05"),
    PersonSpec("Anna Bergström", "SE", "Göteborg", "1974-12-12"),
    PersonSpec("François Dubois", "FR", "Lyon", "1961-02-17"),
    PersonSpec("Ngozi Eze", "NG", "Enugu", "1985-09-23", awards=("Harmattan Prize",)),
    PersonSpec("Małgorzata Nowak", "PL", "Kraków", "1970-04-01"),
    PersonSpec("Giulia Rossi", "IT", "Bologna", None),
    PersonSpec("Pieter de Vries", "NL", "Utrecht", "1958-07-19"),
    PersonSpec("Lucía Fernández", "ES", "Sevilla", "1983-10-30", awards=("European Debut Prize",)),
    PersonSpec("Mette Kjærgaard", "DK", "Aarhus", "1969-03-03"),
    PersonSpec("Henrik Aasen", "NO", "Oslo", "1851-02-11", death="1921-12-01"),
    PersonSpec("Sigrid Haugen", "NO", "Bergen", None),
    PersonSpec("Guðrún Jónsdóttir", "IS", "Reykjavík", "1931-06-17", death="2004-03-08"),
    # librarians (Okafor also writes)
    PersonSpec("Chidi Okafor", "NG", "Enugu", "1972-08-15", honorific="Dr.",
               roles=("Librarian", "Author"), works_at="Lagos State Library"),
    PersonSpec("Ingrid Lindqvist", "SE", "Stockholm", "1967-01-09", roles=("Librarian",),
               works_at="Stockholm City Library"),
    PersonSpec("Göran Sjöberg", "SE", None, None, roles=("Librarian",),
               works_at="Stockholm City Library", email=False),
    PersonSpec("Elin Lundqvist", "SE", "Malmö", "1991-09-04", roles=("Librarian",),
               works_at="Stockholm City Library"),
    PersonSpec("Søren Kjær", "DK", "København", "1980-11-27", roles=("Librarian",),
               works_at="Copenhagen Main Library"),
    PersonSpec("Marta Wróbel", "PL", "Warszawa", "1988-02-29", roles=("Librarian",),
               works_at="Kraków Public Library"),
)


@dataclass
class BookSpec:
    title: str
    authors: tuple[str, ...]
    publisher: str | None
    genres: tuple[str, ...]
    year: int
    pages: int | None
    rating: str | None = "random"
    isbn: bool = True


ANCHOR_BOOKS: tuple[BookSpec, ...] = (
    BookSpec("Harbour Lights", ("Zoë Müller",), "Suhrbach Verlag", ("crime",), 2019, 412),
    BookSpec("The Ninth Tram", ("Zoë Müller",), "Suhrbach Verlag", ("crime",), 2015, None),
    BookSpec("Paper Cranes over Altona", ("Zoë Müller",), "Elbe & Söhne", ("historical",), 2008, 356),
    BookSpec("Kiel Canal Blues", ("Zoë Müller",), "Suhrbach Verlag", ("crime",), 2021, 298),
    BookSpec("A Grammar of Rain", ("Zoë Müller",), "Suhrbach Verlag", ("poetry",), 2011, 96),
    BookSpec("Quiet Machines", ("Zoë Müller",), "Elbe & Söhne", ("scifi",), 2023, 501),
    BookSpec("The Ferryman's Ledger", ("Zoë Müller",), "Suhrbach Verlag", ("crime", "historical"), 2017, 377),
    BookSpec("Nordlicht", ("Hans Müller",), "Elbe & Söhne", ("historical",), 1972, 288),
    BookSpec("Die stille Brücke", ("Hans Müller",), "Elbe & Söhne", ("historical",), 1968, 264),
    BookSpec("Bavarian Winters", ("Hans Müller",), "Suhrbach Verlag", ("travel",), 1981, 212),
    BookSpec("Harbour", ("Lars Ødegaard",), "Nordlys Forlag", ("crime",), 2004, 264),
    BookSpec("The Lighthouse Keeper's Daughter", ("Lars Ødegaard",), "Nordlys Forlag", ("historical",), 1998, 431),
    BookSpec("Northern Silence", ("Lars Ødegaard",), "Nordlys Forlag", ("crime",), 2010, 318),
    BookSpec("Troll Weather", ("Lars Ødegaard",), "Nordlys Forlag", ("children",), 2013, 48),
    BookSpec("Cod and Kings", ("Lars Ødegaard",), "Nordlys Forlag", ("essay",), 2018, 236, isbn=False),
    BookSpec("Winter Orchards", ("Björk Sigurðardóttir",), "Bjartur & Co", ("poetry",), 2012, 120, rating="4.93"),
    BookSpec("Glacier Hymns", ("Björk Sigurðardóttir",), "Bjartur & Co", ("poetry",), 2016, 88),
    BookSpec("The Puffin Census", ("Björk Sigurðardóttir",), "Bjartur & Co", ("children",), 2019, 72),
    BookSpec("Black Sand Letters", ("Björk Sigurðardóttir",), "Bjartur & Co", ("essay",), 2022, 210),
    BookSpec("The Salt Archive", ("José Almeida",), "Edições Atlântico", ("historical",), 1989, 612),
    BookSpec("Tiles of Alfama", ("José Almeida",), "Edições Atlântico", ("historical",), 1994, 540),
    BookSpec("The Cork Merchant", ("José Almeida",), "Livraria Douro", ("historical",), 1979, 455),
    BookSpec("Port Wine Elegies", ("José Almeida",), "Livraria Douro", ("poetry",), 1985, 102),
    BookSpec("Saudade Street", ("José Almeida",), "Edições Atlântico", ("romance",), 2001, 333),
    BookSpec("The Last Tram to Belém", ("José Almeida",), "Edições Atlântico", ("crime",), 2007, 289),
    BookSpec("Winter", ("Anna Berg",), "Svea Böcker", ("romance",), 2020, 244),
    BookSpec("Gotland Summer", ("Anna Berg",), "Svea Böcker", ("romance",), 2022, 230),
    BookSpec("The Glass Orchard", ("Anna Bergström",), "Svea Böcker", ("fantasy",), 2014, 688),
    BookSpec("Ash and Amber", ("Anna Bergström",), "Norrland Press", ("fantasy",), 2016, 702),
    BookSpec("Queen of Moss", ("Anna Bergström",), "Svea Böcker", ("fantasy",), 2021, 655),
    BookSpec("Atlas of Small Rivers", ("François Dubois",), "Maison Lumière", ("travel",), 2009, 275),
    BookSpec("The Lyon Notebooks", ("François Dubois",), "Éditions du Rhône", ("essay",), 1999, 190),
    BookSpec("Bread and Silk", ("François Dubois",), "Éditions du Rhône", ("historical",), 2003, 480),
    BookSpec("Cartographers", ("François Dubois",), "Maison Lumière", ("scifi",), 2018, 520),
    BookSpec("Harmattan Season", ("Ngozi Eze",), "Lagoon Press", ("romance",), 2015, 310),
    BookSpec("The Yam Festival", ("Ngozi Eze",), "Lagoon Press", ("children",), 2017, 96),
    BookSpec("Rain on Zinc", ("Ngozi Eze",), "Lagoon Press", ("poetry",), 2020, 110),
    BookSpec("Letters from Lagos", ("Chidi Okafor",), "Lagoon Press", ("essay",), 2011, 234),
    BookSpec("The Catalogue of Lost Things", ("Chidi Okafor", "Ngozi Eze"), "Lagoon Press", ("scifi",), 2019, 377),
    BookSpec("Night Train to Kraków", ("Małgorzata Nowak",), "Wydawnictwo Wisła", ("crime",), 2006, 342),
    BookSpec("The Amber Room Affair", ("Małgorzata Nowak",), "Wydawnictwo Wisła", ("crime",), 2012, 398),
    BookSpec("Vistula Mornings", ("Małgorzata Nowak",), "Wydawnictwo Wisła", ("poetry",), 1997, 84),
    BookSpec("Dragon of Wawel Hill", ("Małgorzata Nowak",), "Wydawnictwo Wisła", ("children",), 2014, 90),
    BookSpec("Porticoes", ("Giulia Rossi",), "Casa Editrice Felsina", ("essay",), 2005, 150),
    BookSpec("The Bologna Book of Ghosts", ("Giulia Rossi",), "Casa Editrice Felsina", ("fantasy",), 2013, 390),
    BookSpec("Canal Ice", ("Pieter de Vries",), "Uitgeverij Grachten", ("crime",), 1996, 300),
    BookSpec("Tulip Debt", ("Pieter de Vries",), "Uitgeverij Grachten", ("historical",), 2002, 420),
    BookSpec("The Windmill Physicist", ("Pieter de Vries",), "Uitgeverij Grachten", ("biography",), 2019, 560),
    BookSpec("Orange Blossom Ledger", ("Lucía Fernández",), "Editorial Guadalquivir", ("romance",), 2010, 280),
    BookSpec("Flamenco for Astronauts", ("Lucía Fernández",), "Editorial Guadalquivir", ("scifi",), 2021, 350),
    BookSpec("Smørrebrød Diaries", ("Mette Kjærgaard",), "Forlaget Havn", ("travel",), 2008, 198),
    BookSpec("The Danish Lighthouse", ("Mette Kjærgaard",), "Forlaget Havn", ("historical",), 2015, 444),
    BookSpec("Skagen Light", ("Mette Kjærgaard",), "Forlaget Havn", ("romance",), 2019, 256),
    BookSpec("The Herring Years", ("Henrik Aasen",), None, ("historical",), 1887, 340, rating=None, isbn=False),
    BookSpec("Fjord Psalms", ("Sigrid Haugen",), "Nordlys Forlag", ("poetry",), 1994, 76),
    BookSpec("The Complete Sagas of the North", ("Guðrún Jónsdóttir",), "Bjartur & Co", ("historical",), 1996, 1184),
)

# (library, book, copies): holdings every question about copies depends on
FORCED_HOLDINGS: tuple[tuple[str, str, int], ...] = (
    ("Stockholm City Library", "Winter Orchards", 3),
    ("Lagos State Library", "Letters from Lagos", 6),
    ("Lisbon Municipal Library", "The Salt Archive", 12),
    ("Porto Municipal Library", "The Salt Archive", 5),
    ("Amsterdam Public Library", "The Salt Archive", 2),
    ("Munich City Library", "Harbour Lights", 4),
)
# (library, book) pairs that must not exist (gold answer of an ASK question is "no")
FORBIDDEN_HOLDINGS: tuple[tuple[str, str], ...] = (
    ("Deichman Oslo", "The Salt Archive"),
    ("Munich City Library", "Nordlicht"),
)
# books whose holdings are all forced (superlatives over their copies must stay unique)
EXCLUSIVE_BOOKS: tuple[str, ...] = ("The Salt Archive",)


# --------------------------------------------------------------------------------------------
# Filler vocabulary
# --------------------------------------------------------------------------------------------

FIRST_NAMES: dict[str, tuple[str, ...]] = {
    "DE": ("Jonas", "Lena", "Felix", "Jürgen", "Sabine", "Karl", "Käthe", "Lukas", "Greta", "Matthias"),
    "FR": ("Amélie", "Hélène", "Étienne", "Julien", "Camille", "Louis", "Chloé", "Théo"),
    "NO": ("Håkon", "Erlend", "Kari", "Torunn", "Øystein", "Solveig", "Ragnhild", "Eirik"),
    "SE": ("Astrid", "Linnea", "Sven", "Märta", "Oskar", "Elin", "Åsa", "Nils"),
    "DK": ("Rasmus", "Freja", "Ida", "Mads", "Signe", "Jørgen", "Karen"),
    "IS": ("Sigríður", "Einar", "Þóra", "Hallgrímur", "Katrín", "Ásgeir"),
    "PT": ("João", "Inês", "Tomás", "Beatriz", "Gonçalo", "Leonor"),
    "ES": ("Álvaro", "Carmen", "Íñigo", "Sofía", "Javier", "Rocío"),
    "PL": ("Zofia", "Jakub", "Łucja", "Piotr", "Agnieszka", "Tomasz"),
    "NG": ("Chinonso", "Adaeze", "Emeka", "Folake", "Tunde", "Amaka"),
    "IT": ("Marco", "Chiara", "Niccolò", "Francesca", "Lorenzo", "Elena"),
    "NL": ("Femke", "Daan", "Sanne", "Joost", "Maartje", "Bram"),
}
SURNAMES: dict[str, tuple[str, ...]] = {
    "DE": ("Schröder", "Becker", "Hoffmann", "Weiß", "Krüger", "Fischer", "Wagner", "Schäfer", "Vogel"),
    "FR": ("Lefèvre", "Moreau", "Girard", "Bonnet", "Rousseau", "Fontaine", "Chevalier"),
    "NO": ("Hansen", "Larsen", "Solberg", "Bakke", "Strand", "Økland", "Lie"),
    "SE": ("Andersson", "Nilsson", "Åkesson", "Holm", "Lundqvist", "Ekström"),
    "DK": ("Jensen", "Nielsen", "Sørensen", "Christensen", "Højgaard", "Dahl"),
    "IS": ("Jónsdóttir", "Einarsson", "Magnússon", "Ólafsdóttir", "Stefánsson"),
    "PT": ("Silva", "Santos", "Ferreira", "Gonçalves", "Araújo", "Lopes"),
    "ES": ("García", "Martínez", "Núñez", "López", "Peña", "Ibáñez"),
    "PL": ("Kowalski", "Wiśniewska", "Zieliński", "Kamińska", "Lewandowski", "Dąbrowska"),
    "NG": ("Okonkwo", "Adeyemi", "Balogun", "Nwosu", "Ogunleye", "Obi"),
    "IT": ("Bianchi", "Ricci", "Marino", "Greco", "Esposito", "Colombo"),
    "NL": ("Jansen", "Bakker", "Visser", "van Dijk", "de Jong", "Smit"),
}
TITLE_ADJECTIVES = (
    "Silent", "Crimson", "Hidden", "Broken", "Golden", "Distant", "Forgotten", "Hollow", "Burning",
    "Iron", "Pale", "Wandering", "Secret", "Drowned", "Endless", "Bitter", "Copper", "Velvet",
    "Sleeping", "Borrowed", "Seventh", "Green", "Frozen", "Invisible",
)
TITLE_NOUNS = (
    "Garden", "River", "Mirror", "Lantern", "Bridge", "Island", "Kingdom", "Clock", "Forest",
    "Station", "Compass", "Cathedral", "Orchestra", "Harvest", "Shadow", "Map", "Tide", "Mountain",
    "Beekeeper", "Mapmaker", "Violin", "Alphabet", "Comet", "Meadow", "Fox", "Widow", "Doctor",
)
TITLE_PLURALS = (
    "Swallows", "Strangers", "Bells", "Foxes", "Small Hours", "Lost Causes", "Glass", "Ashes",
    "Whispers", "Cranes", "Thieves", "Tides", "Wolves",
)
# words that name anchor books: kept out of filler titles so anchor labels stay unambiguous
RESERVED_TITLE_WORDS = ("winter", "harbour", "salt", "archive", "orchard", "nordlicht", "light",
                        "lagos", "kraków", "tram")


# --------------------------------------------------------------------------------------------
# IRIs and Turtle terms
# --------------------------------------------------------------------------------------------

_TRANSLIT = str.maketrans({"ø": "o", "Ø": "O", "ł": "l", "Ł": "L", "æ": "ae", "Æ": "AE",
                           "ð": "d", "Ð": "D", "þ": "th", "Þ": "Th", "ß": "ss", "&": "and"})


def ascii_slug(text: str) -> str:
    """Lower-case ASCII slug: 'Elbe & Söhne' -> 'elbe-and-sohne'."""
    folded = unicodedata.normalize("NFKD", text.translate(_TRANSLIT))
    plain = "".join(c for c in folded if not unicodedata.combining(c)).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", plain.lower()).strip("-")


def pct(text: str) -> str:
    """Percent-encode UTF-8 as real KGs do: 'Zoë.Müller' -> 'Zo%C3%AB.M%C3%BCller'."""
    return quote(text, safe="-._~")


def person_iri(name: str) -> str:
    return f"{RES}person-{pct(name.replace(' ', '.'))}"


def city_iri(native: str) -> str:
    return f"{RES}city-{pct(native.replace(' ', '_'))}"


def country_iri(code: str) -> str:
    return f"{RES}country-{code}"


def library_iri(label: str) -> str:
    return f"{RES}library/{ascii_slug(label)}"


def publisher_iri(label: str) -> str:
    return f"{RES}publisher_{ascii_slug(label).replace('-', '_')}"


def genre_iri(slug: str) -> str:
    return f"{RES}genre-{slug}"


def award_iri(label: str) -> str:
    return f"{RES}award-{ascii_slug(label)}"


def book_iri(number: int) -> str:
    return f"{RES}book-{number:04d}"


def ref(iri: str) -> str:
    return f"<{iri}>"


def ont(local: str) -> str:
    return f"do:{local}"


def string_lit(value: str, lang: str | None = None) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"' + (f"@{lang}" if lang else "")


def typed_lit(value: object, datatype: str) -> str:
    return f'"{value}"^^xsd:{datatype}'


# --------------------------------------------------------------------------------------------
# Graph construction
# --------------------------------------------------------------------------------------------


class Graph:
    """Triples grouped by subject, kept in insertion order so output is deterministic."""

    def __init__(self) -> None:
        self.subjects: dict[str, list[tuple[str, str]]] = {}

    def add(self, subject: str, predicate: str, obj: str) -> None:
        pairs = self.subjects.setdefault(subject, [])
        if (predicate, obj) not in pairs:
            pairs.append((predicate, obj))

    def __len__(self) -> int:
        return sum(len(pairs) for pairs in self.subjects.values())

    def objects(self, subject: str, predicate: str) -> list[str]:
        return [o for p, o in self.subjects.get(subject, []) if p == predicate]


@dataclass
class World:
    """Everything generated, with lookups the question builders use."""

    graph: Graph = field(default_factory=Graph)
    people: dict[str, str] = field(default_factory=dict)      # name -> IRI
    books: dict[str, str] = field(default_factory=dict)       # title -> IRI
    libraries: dict[str, str] = field(default_factory=dict)   # label -> IRI
    publishers: dict[str, str] = field(default_factory=dict)  # label -> IRI


def random_date(rng: random.Random, year: int) -> str:
    return f"{year:04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def add_ontology(g: Graph) -> None:
    for local, label, comment, parent in CLASSES:
        s = ont(local)
        g.add(s, "a", "owl:Class")
        g.add(s, "rdfs:label", string_lit(label, "en"))
        g.add(s, "rdfs:comment", string_lit(comment, "en"))
        if parent:
            g.add(s, "rdfs:subClassOf", ont(parent))
    for local, kind, label, domain, rng_, comment in PROPERTIES:
        s = ont(local)
        g.add(s, "a", "owl:ObjectProperty" if kind == "object" else "owl:DatatypeProperty")
        g.add(s, "rdfs:label", string_lit(label, "en"))
        g.add(s, "rdfs:comment", string_lit(comment, "en"))
        g.add(s, "rdfs:domain", ont(domain))
        g.add(s, "rdfs:range", rng_ if rng_.startswith("xsd:") else ont(rng_))


def add_places(g: Graph) -> None:
    for code, (label, _lang) in COUNTRIES.items():
        s = ref(country_iri(code))
        g.add(s, "a", ont("Country"))
        g.add(s, "rdfs:label", string_lit(label, "en"))
        g.add(s, ont("countryCode"), string_lit(code))
    for native, (code, english, population) in CITIES.items():
        s = ref(city_iri(native))
        g.add(s, "a", ont("City"))
        lang = COUNTRIES[code][1]
        if code == "NG":
            g.add(s, "rdfs:label", string_lit(native))  # untagged: labels are not uniform
        else:
            g.add(s, "rdfs:label", string_lit(english or native, "en"))
            if english:
                g.add(s, "rdfs:label", string_lit(native, lang))
        g.add(s, ont("inCountry"), ref(country_iri(code)))
        if population is not None:
            g.add(s, ont("population"), typed_lit(population, "integer"))


def add_institutions(world: World) -> None:
    g = world.graph
    for label, (city, founded, opened, lang) in LIBRARIES.items():
        iri = library_iri(label)
        world.libraries[label] = iri
        s = ref(iri)
        g.add(s, "a", ont("Library"))
        g.add(s, "rdfs:label", string_lit(label, lang))
        g.add(s, ont("locatedIn"), ref(city_iri(city)))
        g.add(s, ont("foundingYear"), typed_lit(founded, "integer"))
        if opened:
            g.add(s, ont("openingDate"), typed_lit(opened, "date"))
    for label, (city, founded) in PUBLISHERS.items():
        iri = publisher_iri(label)
        world.publishers[label] = iri
        s = ref(iri)
        g.add(s, "a", ont("Publisher"))
        g.add(s, "rdfs:label", string_lit(label))
        g.add(s, ont("headquarteredIn"), ref(city_iri(city)))
        g.add(s, ont("foundingYear"), typed_lit(founded, "integer"))
    for slug, (label, _weight) in GENRES.items():
        s = ref(genre_iri(slug))
        g.add(s, "a", ont("Genre"))
        g.add(s, "rdfs:label", string_lit(label, "en"))
    for label, (money, founded) in AWARDS.items():
        s = ref(award_iri(label))
        g.add(s, "a", ont("Award"))
        g.add(s, "rdfs:label", string_lit(label, "en"))
        g.add(s, ont("prizeMoney"), typed_lit(money, "decimal"))
        if founded is not None:
            g.add(s, ont("foundingYear"), typed_lit(founded, "integer"))


def email_for(name: str, library: str) -> str:
    local = ".".join(ascii_slug(part) for part in name.split())
    return f"{local}@{ascii_slug(library)}.example.org"


def add_person(world: World, p: PersonSpec) -> str:
    if p.name in world.people:
        raise GenerationError(f"duplicate person name {p.name!r}")
    iri = person_iri(p.name)
    world.people[p.name] = iri
    g, s = world.graph, ref(iri)
    for role in p.roles:
        g.add(s, "a", ont(role))
    g.add(s, ont("name"), string_lit(p.name))
    if p.honorific:
        g.add(s, ont("honorific"), string_lit(p.honorific))
    if p.born_in:
        g.add(s, ont("bornIn"), ref(city_iri(p.born_in)))
    if p.birth:
        g.add(s, ont("birthDate"), typed_lit(p.birth, "date"))
    if p.death:
        g.add(s, ont("deathDate"), typed_lit(p.death, "date"))
    g.add(s, ont("nationality"), ref(country_iri(p.country)))
    if p.works_at:
        g.add(s, ont("worksAt"), ref(library_iri(p.works_at)))
        if p.email:
            g.add(s, ont("email"), string_lit(email_for(p.name, p.works_at)))
    for award in p.awards:
        g.add(s, ont("receivedAward"), ref(award_iri(award)))
    return iri


def random_isbn(rng: random.Random) -> str:
    digits = [9, 7, 8] + [rng.randint(0, 9) for _ in range(9)]
    check = (10 - sum(d * (1 if i % 2 == 0 else 3) for i, d in enumerate(digits)) % 10) % 10
    body = "".join(map(str, digits))
    return f"{body[:3]}-{body[3]}-{body[4:8]}-{body[8:12]}-{check}"


def random_pages(rng: random.Random, genre: str) -> int:
    # anchors hold the extremes (48 and 1184 pages), so superlatives have one answer
    if genre in ("children", "poetry"):
        return rng.randint(56, 200)
    return rng.randint(150, 900)


def add_book(world: World, rng: random.Random, b: BookSpec, language: str) -> str:
    if b.title.lower() in (t.lower() for t in world.books):
        raise GenerationError(f"duplicate book title {b.title!r}")
    iri = book_iri(len(world.books) + 1)
    world.books[b.title] = iri
    g, s = world.graph, ref(iri)
    g.add(s, "a", ont("Book"))
    g.add(s, "rdfs:label", string_lit(b.title))
    for author in b.authors:
        g.add(s, ont("author"), ref(world.people[author]))
        g.add(ref(world.people[author]), "a", ont("Author"))
    if b.publisher:
        g.add(s, ont("publishedBy"), ref(world.publishers[b.publisher]))
    for genre in b.genres:
        g.add(s, ont("genre"), ref(genre_iri(genre)))
    g.add(s, ont("publicationYear"), typed_lit(b.year, "integer"))
    if b.pages is not None:
        g.add(s, ont("pageCount"), typed_lit(b.pages, "integer"))
    if b.isbn:
        g.add(s, ont("isbn"), string_lit(random_isbn(rng)))
    g.add(s, ont("language"), string_lit(language))
    rating = f"{rng.uniform(2.8, 4.7):.2f}" if b.rating == "random" else b.rating
    if rating is not None:
        g.add(s, ont("rating"), typed_lit(rating, "decimal"))
    return iri


def filler_name(rng: random.Random, country: str, used: set[str]) -> str:
    for _ in range(200):
        name = f"{rng.choice(FIRST_NAMES[country])} {rng.choice(SURNAMES[country])}"
        if name not in used:
            return name
    raise GenerationError(f"name pool for {country} exhausted")


def filler_title(rng: random.Random, taken: set[str]) -> str:
    places = [english or native for native, (code, english, _p) in CITIES.items()]
    for _ in range(500):
        pattern = rng.randrange(5)
        adj, noun, noun2 = rng.choice(TITLE_ADJECTIVES), rng.choice(TITLE_NOUNS), rng.choice(TITLE_NOUNS)
        if pattern == 0:
            title = f"The {adj} {noun}"
        elif pattern == 1:
            title = f"{noun} of {rng.choice(TITLE_PLURALS)}"
        elif pattern == 2:
            title = f"The {noun} of {rng.choice(places)}"
        elif pattern == 3:
            title = f"{adj} {rng.choice(TITLE_PLURALS)}"
        else:
            title = f"The {noun} and the {noun2}" if noun != noun2 else f"A {adj} {noun}"
        lowered = title.lower()
        if lowered not in taken and not any(w in lowered for w in RESERVED_TITLE_WORDS):
            return title
    raise GenerationError("title vocabulary exhausted")


def cities_of(country: str) -> list[str]:
    return [native for native, (code, _e, _p) in CITIES.items() if code == country]


def publishers_of(country: str) -> list[str]:
    return [label for label, (city, _f) in PUBLISHERS.items() if CITIES[city][0] == country]


def add_filler_people(world: World, rng: random.Random, authors: int, librarians_per_library: tuple[int, int]) -> list[tuple[PersonSpec, int]]:
    """Random authors (returned with their number of books) and librarians."""
    used = set(world.people)
    countries = list(COUNTRIES)
    result: list[tuple[PersonSpec, int]] = []
    for _ in range(authors):
        country = rng.choice(countries)
        name = filler_name(rng, country, used)
        used.add(name)
        born = rng.randint(1905, 1996)
        death = random_date(rng, rng.randint(born + 55, 2024)) if born < 1945 and rng.random() < 0.6 else None
        spec = PersonSpec(
            name=name, country=country,
            born_in=rng.choice(cities_of(country)) if rng.random() < 0.88 else None,
            birth=random_date(rng, born) if rng.random() < 0.85 else None,
            death=death,
            honorific="Prof." if rng.random() < 0.06 else None,
            awards=(rng.choice(list(AWARDS)),) if rng.random() < 0.15 else (),
        )
        add_person(world, spec)
        result.append((spec, rng.choices((0, 1, 2, 3, 4), weights=(1, 3, 3, 2, 1))[0]))
    anchored = {p.works_at for p in ANCHOR_PEOPLE if p.works_at}
    for library, (city, _f, _o, _l) in LIBRARIES.items():
        country = CITIES[city][0]
        low, high = librarians_per_library
        count = rng.randint(low, high) - (1 if library in anchored else 0)
        for _ in range(max(count, 1)):
            name = filler_name(rng, country, used)
            used.add(name)
            add_person(world, PersonSpec(
                name=name, country=country,
                born_in=rng.choice(cities_of(country)) if rng.random() < 0.5 else None,
                birth=random_date(rng, rng.randint(1960, 2000)) if rng.random() < 0.6 else None,
                roles=("Librarian",), works_at=library, email=rng.random() < 0.75,
            ))
    return result


def add_filler_books(world: World, rng: random.Random, authors: list[tuple[PersonSpec, int]]) -> None:
    taken = {t.lower() for t in world.books}
    genres = list(GENRES)
    weights = [GENRES[g][1] for g in genres]
    for spec, count in authors:
        born = int(spec.birth[:4]) if spec.birth else rng.randint(1930, 1990)
        last = min(int(spec.death[:4]) if spec.death else 2025, 2025)
        for _ in range(count):
            title = filler_title(rng, taken)
            taken.add(title.lower())
            genre = rng.choices(genres, weights=weights)[0]
            extra = rng.choices(genres, weights=weights)[0] if rng.random() < 0.1 else genre
            co_author = ()
            if rng.random() < 0.05 and len(authors) > 1:
                other = rng.choice(authors)[0].name
                co_author = (other,) if other != spec.name else ()
            publishers = publishers_of(spec.country) or list(PUBLISHERS)
            lang = COUNTRIES[spec.country][1] if rng.random() < 0.8 else "en"
            add_book(world, rng, BookSpec(
                title=title, authors=(spec.name, *co_author),
                publisher=rng.choice(publishers) if rng.random() < 0.92 else None,
                genres=(genre,) if extra == genre else (genre, extra),
                year=rng.randint(min(born + 22, last), last),
                pages=random_pages(rng, genre) if rng.random() < 0.9 else None,
                rating="random" if rng.random() < 0.9 else None,
                isbn=rng.random() < 0.85,
            ), lang)


def add_holdings(world: World, rng: random.Random, per_library: tuple[int, int]) -> None:
    g = world.graph
    forbidden = set(FORBIDDEN_HOLDINGS)
    forced = {(lib, book): copies for lib, book, copies in FORCED_HOLDINGS}
    pool = [t for t in world.books if t not in EXCLUSIVE_BOOKS]
    for library in LIBRARIES:
        picked = rng.sample(pool, rng.randint(*per_library))
        picked = [t for t in picked if (library, t) not in forbidden and (library, t) not in forced]
        holdings = [(t, rng.randint(1, 8)) for t in picked]
        holdings += [(book, copies) for (lib, book), copies in forced.items() if lib == library]
        holdings.sort(key=lambda item: world.books[item[0]])
        for title, copies in holdings:
            book = world.books[title]
            s = ref(f"{RES}holding-{ascii_slug(library)}-{book.rsplit('-', 1)[1]}")
            g.add(s, "a", ont("Holding"))
            g.add(s, ont("heldBy"), ref(world.libraries[library]))
            g.add(s, ont("ofBook"), ref(book))
            g.add(s, ont("copies"), typed_lit(copies, "integer"))
            if rng.random() < 0.85:
                g.add(s, ont("loanCount"), typed_lit(rng.randint(0, 40) * copies, "integer"))


def add_head_librarians(world: World) -> None:
    g = world.graph
    for label, iri in world.libraries.items():
        staff = [s for s, pairs in g.subjects.items() if (ont("worksAt"), ref(iri)) in pairs]
        if staff:
            g.add(ref(iri), ont("headLibrarian"), staff[0])


def build_world(seed: int = SEED) -> World:
    rng = random.Random(seed)
    world = World()
    add_ontology(world.graph)
    add_places(world.graph)
    add_institutions(world)
    for person in ANCHOR_PEOPLE:
        add_person(world, person)
    for book in ANCHOR_BOOKS:
        country = next(p.country for p in ANCHOR_PEOPLE if p.name == book.authors[0])
        add_book(world, rng, book, COUNTRIES[country][1])
    fillers = add_filler_people(world, rng, authors=72, librarians_per_library=(1, 3))
    add_filler_books(world, rng, fillers)
    add_holdings(world, rng, per_library=(12, 24))
    add_head_librarians(world)
    return world


PREFIXES = {"do": ONT, "rdfs": RDFS, "xsd": XSD, "owl": OWL, "rdf": RDF}


def render_turtle(g: Graph) -> str:
    lines = [
        "# Demo knowledge graph: a network of European city libraries (CC0-1.0).",
        "# Generated by generate.py; do not edit by hand.",
        f"# {len(g)} triples.",
        "",
    ]
    lines += [f"@prefix {p}: <{iri}> ." for p, iri in PREFIXES.items()]
    lines.append("")
    for subject, pairs in g.subjects.items():
        body = " ;\n    ".join(f"{p} {o}" for p, o in pairs)
        lines.append(f"{subject} {body} .")
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuestionSpec:
    family: str
    split: str
    text: str
    features: tuple[str, ...]
    classes: tuple[str, ...]
    properties: tuple[str, ...]
    query: str
    hard: str = ""   # why a naive retrieve-and-relink method is likely to fail (documentation)


def sparql(head: str, body: Sequence[str], tail: str = "") -> str:
    """A gold query in the house style; PREFIX lines only for prefixes the query uses."""
    text = "\n".join([head, "WHERE", "{", *[f"  {line}" for line in body], "}"])
    if tail:
        text += f"\n{tail}"
    used = [p for p in ("do", "rdfs", "xsd") if f"{p}:" in text]
    prefixes = [f"PREFIX {p}: <{PREFIXES[p]}>" for p in used]
    return "\n".join(prefixes + [text]) + "\n"


def build_questions(world: World) -> list[QuestionSpec]:
    person, book, lib, pub = world.people, world.books, world.libraries, world.publishers

    def p(name: str) -> str:
        return ref(person[name])

    def b(title: str) -> str:
        return ref(book[title])

    def lb(label: str) -> str:
        return ref(lib[label])

    sel = "SELECT DISTINCT ?result"
    count = "SELECT (COUNT(DISTINCT ?book) AS ?count)"
    qs: list[QuestionSpec] = []

    def add(family: str, split: str, text: str, features: Iterable[str], classes: Iterable[str],
            properties: Iterable[str], query: str, hard: str = "") -> None:
        qs.append(QuestionSpec(family, split, text, tuple(features), tuple(classes), tuple(properties), query, hard))

    # F01 book -> author (forward)
    fam = "book_author"
    add(fam, "train", "Who wrote The Salt Archive?", ["SELECT"], [":Book", ":Author"], [":author"],
        sparql(sel, [f"{b('The Salt Archive')} do:author ?result ."]))
    add(fam, "train", "Who is the author of Winter Orchards?", ["SELECT"], [":Book", ":Author"], [":author"],
        sparql(sel, [f"{b('Winter Orchards')} do:author ?result ."]))
    add(fam, "validation", "Which author wrote Harbour?", ["SELECT"], [":Book", ":Author"], [":author"],
        sparql(sel, [f"{b('Harbour')} do:author ?result ."]),
        hard="'Harbour' is a substring of 'Harbour Lights' (a different author)")
    add(fam, "test", "Who wrote Nigth Train to Krakow?", ["SELECT"], [":Book", ":Author"], [":author"],
        sparql(sel, [f"{b('Night Train to Kraków')} do:author ?result ."]),
        hard="typo 'Nigth' and 'Krakow' without its accent")

    # F02 author -> books (inverse of F01)
    fam = "books_by_author"
    add(fam, "train", "Which books did José Almeida write?", ["SELECT"], [":Book", ":Author"], [":author"],
        sparql(sel, [f"?result do:author {p('José Almeida')} ."]))
    add(fam, "train", "List all books written by Zoë Müller.", ["SELECT"], [":Book", ":Author"], [":author"],
        sparql(sel, [f"?result do:author {p('Zoë Müller')} ."]))
    add(fam, "validation", "What did Ms. Bergström write?", ["SELECT"], [":Book", ":Author"], [":author"],
        sparql(sel, [f"?result do:author {p('Anna Bergström')} ."]),
        hard="title + surname only; 'Anna Berg' is a prefix of 'Anna Bergström'")
    add(fam, "test", "Which books is Lars Odegaard the author of?", ["SELECT"], [":Book", ":Author"], [":author"],
        sparql(sel, [f"?result do:author {p('Lars Ødegaard')} ."]),
        hard="worded like F01 'Who is the author of X?' but the relation direction is inverted; Ø written as O")

    # F03 book -> publisher
    fam = "book_publisher"
    add(fam, "train", "Which publisher published Harbour Lights?", ["SELECT"], [":Book", ":Publisher"], [":publishedBy"],
        sparql(sel, [f"{b('Harbour Lights')} do:publishedBy ?result ."]))
    add(fam, "train", "Who is the publisher of Letters from Lagos?", ["SELECT"], [":Book", ":Publisher"], [":publishedBy"],
        sparql(sel, [f"{b('Letters from Lagos')} do:publishedBy ?result ."]))
    add(fam, "test", "Which company released Winter?", ["SELECT"], [":Book", ":Publisher"], [":publishedBy"],
        sparql(sel, [f"{b('Winter')} do:publishedBy ?result ."]),
        hard="'Winter' is also a substring of 'Winter Orchards' and 'Bavarian Winters'")

    # F04 person -> birthplace
    fam = "birthplace"
    add(fam, "train", "Where was Zoë Müller born?", ["SELECT"], [":Person", ":City"], [":bornIn"],
        sparql(sel, [f"{p('Zoë Müller')} do:bornIn ?result ."]))
    add(fam, "train", "In which city was José Almeida born?", ["SELECT"], [":Person", ":City"], [":bornIn"],
        sparql(sel, [f"{p('José Almeida')} do:bornIn ?result ."]))
    add(fam, "validation", "Where was Dr. Okafor born?", ["SELECT"], [":Person", ":City"], [":bornIn"],
        sparql(sel, [f"{p('Chidi Okafor')} do:bornIn ?result ."]),
        hard="title + surname only")
    add(fam, "test", "What is the birthplace of Bjork Sigurdardottir?", ["SELECT"], [":Person", ":City"], [":bornIn"],
        sparql(sel, [f"{p('Björk Sigurðardóttir')} do:bornIn ?result ."]),
        hard="ö and ð written without diacritics")

    # F05 count books of an author
    fam = "count_books_by_author"
    add(fam, "train", "How many books has Zoë Müller written?", ["SELECT", "COUNT"], [":Book", ":Author"], [":author"],
        sparql(count, [f"?book do:author {p('Zoë Müller')} ."]))
    add(fam, "train", "How many books did François Dubois write?", ["SELECT", "COUNT"], [":Book", ":Author"], [":author"],
        sparql(count, [f"?book do:author {p('François Dubois')} ."]))
    add(fam, "validation", "How many books has Mr. Ødegaard written?", ["SELECT", "COUNT"], [":Book", ":Author"], [":author"],
        sparql(count, [f"?book do:author {p('Lars Ødegaard')} ."]),
        hard="title + surname only")
    add(fam, "test", "How many books did José Almeida write?", ["SELECT", "COUNT"], [":Book", ":Author"], [":author"],
        sparql(count, [f"?book do:author {p('José Almeida')} ."]),
        hard="nearest training question is F02 'Which books did José Almeida write?' (list, not count)")

    # F06 count books in a genre
    fam = "count_books_in_genre"
    add(fam, "train", "How many crime novels are there?", ["SELECT", "COUNT"], [":Book", ":Genre"], [":genre"],
        sparql(count, [f"?book do:genre {ref(genre_iri('crime'))} ."]))
    add(fam, "train", "How many books belong to the poetry genere?", ["SELECT", "COUNT"], [":Book", ":Genre"], [":genre"],
        sparql(count, [f"?book do:genre {ref(genre_iri('poetry'))} ."]),
        hard="typo 'genere'")
    add(fam, "validation", "Count the science fiction books.", ["SELECT", "COUNT"], [":Book", ":Genre"], [":genre"],
        sparql(count, [f"?book do:genre {ref(genre_iri('scifi'))} ."]))

    # F07 ASK: did X write Y?
    fam = "ask_wrote"
    add(fam, "train", "Did Zoë Müller write Harbour Lights?", ["ASK"], [":Book", ":Author"], [":author"],
        sparql("ASK", [f"{b('Harbour Lights')} do:author {p('Zoë Müller')} ."]))
    add(fam, "train", "Did Lars Ødegaard write Winter Orchards?", ["ASK"], [":Book", ":Author"], [":author"],
        sparql("ASK", [f"{b('Winter Orchards')} do:author {p('Lars Ødegaard')} ."]))
    add(fam, "validation", "Did Hans Muller write Nordlicht?", ["ASK"], [":Book", ":Author"], [":author"],
        sparql("ASK", [f"{b('Nordlicht')} do:author {p('Hans Müller')} ."]),
        hard="ü written as u and two authors named Müller (answer: yes)")
    add(fam, "test", "Was Harbour written by Zoë Müller?", ["ASK"], [":Book", ":Author"], [":author"],
        sparql("ASK", [f"{b('Harbour')} do:author {p('Zoë Müller')} ."]),
        hard="'Harbour' vs 'Harbour Lights': linking the longer title flips the answer (answer: no)")

    # F08 ASK: does library L hold book B?
    fam = "ask_holding"
    add(fam, "train", "Does the Stockholm City Library have a copy of Winter Orchards?", ["ASK"],
        [":Holding", ":Library", ":Book"], [":heldBy", ":ofBook"],
        sparql("ASK", [f"?holding do:heldBy {lb('Stockholm City Library')} ;",
                       f"  do:ofBook {b('Winter Orchards')} ."]))
    add(fam, "train", "Does Deichman Oslo hold The Salt Archive?", ["ASK"],
        [":Holding", ":Library", ":Book"], [":heldBy", ":ofBook"],
        sparql("ASK", [f"?holding do:heldBy {lb('Deichman Oslo')} ;",
                       f"  do:ofBook {b('The Salt Archive')} ."]))
    add(fam, "validation", "Is Nordlicht available at the Munich City Library?", ["ASK"],
        [":Holding", ":Library", ":Book"], [":heldBy", ":ofBook"],
        sparql("ASK", [f"?holding do:heldBy {lb('Munich City Library')} ;",
                       f"  do:ofBook {b('Nordlicht')} ."]))
    add(fam, "test", "Can I borrow Letters from Lagos at the Lagos State Library?", ["ASK"],
        [":Holding", ":Library", ":Book"], [":heldBy", ":ofBook"],
        sparql("ASK", [f"?holding do:heldBy {lb('Lagos State Library')} ;",
                       f"  do:ofBook {b('Letters from Lagos')} ."]),
        hard="'Lagos' occurs in both the book title and the library name (and is a city)")

    # F09 superlatives over books
    fam = "superlative_book"
    order = ["SELECT", "ORDER", "LIMIT"]
    add(fam, "train", "Which book has the most pages?", order, [":Book"], [":pageCount"],
        sparql(sel, ["?result a do:Book ;", "  do:pageCount ?pages ."], "ORDER BY DESC(?pages)\nLIMIT 1"))
    add(fam, "train", "What is the highest-rated book?", order, [":Book"], [":rating"],
        sparql(sel, ["?result a do:Book ;", "  do:rating ?rating ."], "ORDER BY DESC(?rating)\nLIMIT 1"))
    add(fam, "validation", "Which is the shortest book?", order, [":Book"], [":pageCount"],
        sparql(sel, ["?result a do:Book ;", "  do:pageCount ?pages ."], "ORDER BY ASC(?pages)\nLIMIT 1"))
    add(fam, "test", "What is the oldest book in the catalogue?", order, [":Book"], [":publicationYear"],
        sparql(sel, ["?result a do:Book ;", "  do:publicationYear ?year ."], "ORDER BY ASC(?year)\nLIMIT 1"),
        hard="'oldest' also appears in F10 'What is the oldest library?' (other class and property)")

    # F10 superlatives over other classes
    fam = "superlative_other"
    add(fam, "train", "Which city has the largest population?", order, [":City"], [":population"],
        sparql(sel, ["?result a do:City ;", "  do:population ?population ."], "ORDER BY DESC(?population)\nLIMIT 1"))
    add(fam, "train", "What is the oldest library?", order, [":Library"], [":foundingYear"],
        sparql(sel, ["?result a do:Library ;", "  do:foundingYear ?year ."], "ORDER BY ASC(?year)\nLIMIT 1"))
    add(fam, "validation", "Which publisher was founded most recentely?", order, [":Publisher"], [":foundingYear"],
        sparql(sel, ["?result a do:Publisher ;", "  do:foundingYear ?year ."], "ORDER BY DESC(?year)\nLIMIT 1"),
        hard="typo 'recentely'; do:foundingYear used outside its declared domain")
    add(fam, "test", "Which library holds the most copies of The Salt Archive?", order,
        [":Library", ":Holding", ":Book"], [":heldBy", ":ofBook", ":copies"],
        sparql(sel, [f"?holding do:ofBook {b('The Salt Archive')} ;", "  do:heldBy ?result ;", "  do:copies ?copies ."],
               "ORDER BY DESC(?copies)\nLIMIT 1"),
        hard="superlative through the n-ary Holding node; no training sibling has this join")

    # F11 numeric filters
    fam = "filter_numeric"
    num = ["SELECT", "FILTER"]
    add(fam, "train", "Which books were published after 2020?", num, [":Book"], [":publicationYear"],
        sparql(sel, ["?result a do:Book ;", "  do:publicationYear ?year .", "FILTER (?year > 2020)"]))
    add(fam, "train", "Which books have more than 800 pages?", num, [":Book"], [":pageCount"],
        sparql(sel, ["?result a do:Book ;", "  do:pageCount ?pages .", "FILTER (?pages > 800)"]))
    add(fam, "validation", "Which cities have more than one million inhabitants?", num, [":City"], [":population"],
        sparql(sel, ["?result a do:City ;", "  do:population ?population .", "FILTER (?population > 1000000)"]),
        hard="the number is written in words ('one million')")
    add(fam, "test", "List the books published before 1950.", num, [":Book"], [":publicationYear"],
        sparql(sel, ["?result a do:Book ;", "  do:publicationYear ?year .", "FILTER (?year < 1950)"]),
        hard="comparison direction flips relative to the nearest training question ('after 2020')")

    # F12 string filters
    fam = "filter_string"
    strf = ["SELECT", "FILTER"]
    add(fam, "train", "Which books have the word Winter in their title?", strf, [":Book"], [],
        sparql(sel, ["?result a do:Book ;", "  rdfs:label ?title .", 'FILTER (CONTAINS(LCASE(?title), "winter"))']))
    add(fam, "train", "Which authors have a name containing 'sen'?", strf, [":Author"], [":name"],
        sparql(sel, ["?result a do:Author ;", "  do:name ?name .", 'FILTER (CONTAINS(LCASE(?name), "sen"))']))
    add(fam, "test", "Which libraries have Public in their name?", strf, [":Library"], [],
        sparql(sel, ["?result a do:Library ;", "  rdfs:label ?label .", 'FILTER (CONTAINS(LCASE(STR(?label)), "public"))']),
        hard="libraries are named with language-tagged rdfs:label, authors with do:name")

    # F13 GROUP BY + HAVING
    fam = "group_having"
    grp = ["SELECT", "GROUP", "COUNT", "HAVING"]
    add(fam, "train", "Which authors have written more than 5 books?", grp, [":Author", ":Book"], [":author"],
        sparql("SELECT ?result", ["?book do:author ?result ."],
               "GROUP BY ?result\nHAVING (COUNT(DISTINCT ?book) > 5)"))
    add(fam, "train", f"Which publishers have published more than {PUBLISHER_THRESHOLD} books?", grp,
        [":Publisher", ":Book"], [":publishedBy"],
        sparql("SELECT ?result", ["?book do:publishedBy ?result ."],
               f"GROUP BY ?result\nHAVING (COUNT(DISTINCT ?book) > {PUBLISHER_THRESHOLD})"))
    add(fam, "validation", "Which genres contain more than 30 books?", grp, [":Genre", ":Book"], [":genre"],
        sparql("SELECT ?result", ["?book do:genre ?result ."], "GROUP BY ?result\nHAVING (COUNT(DISTINCT ?book) > 30)"))
    add(fam, "test", "Which libaries hold more than 20 different books?", grp,
        [":Library", ":Holding", ":Book"], [":heldBy", ":ofBook"],
        sparql("SELECT ?result", ["?holding do:heldBy ?result ;", "  do:ofBook ?book ."],
               "GROUP BY ?result\nHAVING (COUNT(DISTINCT ?book) > 20)"),
        hard="typo 'libaries'; counts through the Holding node")

    # F14 OPTIONAL columns
    fam = "optional_attribute"
    opt = ["SELECT", "OPTIONAL"]
    add(fam, "train", "List the librarians of Stockholm City Library with their email addresses where available.", opt,
        [":Librarian", ":Library"], [":worksAt", ":email"],
        sparql("SELECT DISTINCT ?result ?email",
               [f"?result do:worksAt {lb('Stockholm City Library')} .", "OPTIONAL { ?result do:email ?email . }"]))
    add(fam, "train", "Give me all books by Zoë Müller and their page counts if known.", opt,
        [":Book", ":Author"], [":author", ":pageCount"],
        sparql("SELECT DISTINCT ?result ?pages",
               [f"?result do:author {p('Zoë Müller')} .", "OPTIONAL { ?result do:pageCount ?pages . }"]))
    add(fam, "validation", "Which authors were born in Norway, and when were they born (if known)?", opt,
        [":Author", ":City", ":Country"], [":bornIn", ":inCountry", ":birthDate"],
        sparql("SELECT DISTINCT ?result ?birthDate",
               ["?result a do:Author ;", "  do:bornIn ?city .", f"?city do:inCountry {ref(country_iri('NO'))} .",
                "OPTIONAL { ?result do:birthDate ?birthDate . }"]),
        hard="country reached through the birth city (two hops)")
    add(fam, "test", "Show the books published by Nordlys Forlag with their ISBN, if they have one.", opt,
        [":Book", ":Publisher"], [":publishedBy", ":isbn"],
        sparql("SELECT DISTINCT ?result ?isbn",
               [f"?result do:publishedBy {ref(pub['Nordlys Forlag'])} .", "OPTIONAL { ?result do:isbn ?isbn . }"]))

    # F15 librarian -> library (forward)
    fam = "works_at"
    add(fam, "train", "Where does Ms. Lindqvist work?", ["SELECT"], [":Librarian", ":Library"], [":worksAt"],
        sparql(sel, [f"{p('Ingrid Lindqvist')} do:worksAt ?result ."]),
        hard="title + surname only; a colleague is named Elin Lundqvist (one letter off)")
    add(fam, "train", "Which library does Søren Kjær work at?", ["SELECT"], [":Librarian", ":Library"], [":worksAt"],
        sparql(sel, [f"{p('Søren Kjær')} do:worksAt ?result ."]))
    add(fam, "validation", "Where does Marta Wrobel work?", ["SELECT"], [":Librarian", ":Library"], [":worksAt"],
        sparql(sel, [f"{p('Marta Wróbel')} do:worksAt ?result ."]),
        hard="ó written as o")

    # F16 library -> librarians (inverse of F15)
    fam = "library_staff"
    add(fam, "train", "Who works at the Bergen Public Library?", ["SELECT"], [":Librarian", ":Library"], [":worksAt"],
        sparql(sel, [f"?result do:worksAt {lb('Bergen Public Library')} ."]))
    add(fam, "train", "Which librarians are employed by the Lisbon Municipal Library?", ["SELECT"],
        [":Librarian", ":Library"], [":worksAt"],
        sparql(sel, [f"?result do:worksAt {lb('Lisbon Municipal Library')} ."]))
    add(fam, "test", "Who works at the Krakow Public Library?", ["SELECT"], [":Librarian", ":Library"], [":worksAt"],
        sparql(sel, [f"?result do:worksAt {lb('Kraków Public Library')} ."]),
        hard="ó dropped; 'Public Library' is shared by four libraries")
    return qs


# Chosen so that some, but not all, publishers qualify with the committed seed.
PUBLISHER_THRESHOLD = 15


# --------------------------------------------------------------------------------------------
# YAML output (hand-written: the generator is stdlib only)
# --------------------------------------------------------------------------------------------

_PLAIN = re.compile(r"^[A-Za-z][^:#'\"\[\]{}&*!|>%@`]*$")


def yaml_scalar(text: str) -> str:
    """Plain scalar when unambiguous, else a JSON string (valid YAML double-quoted scalar)."""
    if _PLAIN.match(text) and not text.endswith(" "):
        return text
    return json.dumps(text, ensure_ascii=False)


def render_questions(questions: Sequence[QuestionSpec]) -> str:
    lines = [
        "# yamllint disable rule:line-length",
        "# Demo question set (CC0-1.0), generated by generate.py; do not edit by hand.",
        "---",
        "dataset:",
        f"  id: {DATASET_ID}",
        f"  prefix: {DATASET_PREFIX}",
        f"  defaultNamespace: {ONT}",
        "questions:",
    ]
    for qid, q in enumerate(questions, start=1):
        lines += ["", f"  - id: {qid}", "    question:", f"      en: {yaml_scalar(q.text)}", "    features:"]
        lines += [f"      - {f}" for f in q.features]
        lines += ["    classes:"] + [f"      - {c}" for c in q.classes]
        lines += ["    properties:"] + [f"      - {prop}" for prop in q.properties] if q.properties else ["    properties: []"]
        lines += ["    query:", "      sparql: |"]
        lines += [f"        {line}" if line else "" for line in q.query.rstrip("\n").split("\n")]
    return "\n".join(lines) + "\n"


def render_splits(questions: Sequence[QuestionSpec]) -> str:
    """Assignment form of researcher.datasets (it carries the seed; the list form may not)."""
    lines = [
        "# Question splits for the demo dataset, generated by generate.py.",
        "# Hand-made and family-stratified: every template family has training questions, and every",
        "# validation/test question has a sibling of its family in train.",
        f"dataset_id: {DATASET_ID}",
        f"seed: {SPLIT_SEED}",
        "assignment:",
    ]
    family = None
    for qid, q in enumerate(questions, start=1):
        if q.family != family:
            family = q.family
            lines.append(f"  # {family}")
        lines.append(f"  '{qid}': {q.split}")
    return "\n".join(lines) + "\n"


def families(questions: Sequence[QuestionSpec]) -> dict[str, list[int]]:
    """Family name -> question ids (1-based, file order)."""
    result: dict[str, list[int]] = {}
    for qid, q in enumerate(questions, start=1):
        result.setdefault(q.family, []).append(qid)
    return result


def generate(out_dir: Path, seed: int = SEED) -> dict[str, int]:
    """Write kg.ttl, questions.yml and splits.yml into ``out_dir``; return a size summary."""
    world = build_world(seed)
    questions = build_questions(world)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "kg.ttl").write_text(render_turtle(world.graph), encoding="utf-8")
    (out_dir / "questions.yml").write_text(render_questions(questions), encoding="utf-8")
    (out_dir / "splits.yml").write_text(render_splits(questions), encoding="utf-8")
    return {"triples": len(world.graph), "questions": len(questions), "families": len(families(questions))}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="output directory (default: next to this script)")
    parser.add_argument("--seed", type=int, default=SEED, help="seed for the filler entities")
    args = parser.parse_args(argv)
    summary = generate(args.out, args.seed)
    print(", ".join(f"{v} {k}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
